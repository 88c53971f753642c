//! `--server NAME=CMD`: one server of a comparison, named for the table, chart and output folder.

use std::str::FromStr;

/// A server to start with `sh -c command`, known in the outputs as `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedServer {
    pub name: String,
    pub command: String,
}

impl FromStr for NamedServer {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (name, command) = spec
            .split_once('=')
            .ok_or_else(|| format!("expected NAME=COMMAND, got {spec:?}"))?;
        let (name, command) = (name.trim(), command.trim());
        // The name becomes a folder under --output-dir, so it must not climb out of it.
        let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if name.is_empty() || name.starts_with('.') || !name.chars().all(safe) {
            return Err(format!(
                "server name {name:?} must be letters, digits, '-', '_' or '.', not starting with '.'"
            ));
        }
        if command.is_empty() {
            return Err(format!("server {name:?} has no command"));
        }
        Ok(NamedServer {
            name: name.to_owned(),
            command: command.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_keeps_every_equals_sign_after_the_first() {
        let server: NamedServer = "llama-server=llama-server -m a.gguf --alias=x"
            .parse()
            .unwrap();
        assert_eq!(server.name, "llama-server");
        assert_eq!(server.command, "llama-server -m a.gguf --alias=x");
    }

    #[test]
    fn names_that_could_leave_the_output_folder_are_rejected() {
        for spec in ["../x=cmd", "a/b=cmd", ".hidden=cmd", "=cmd", "a b=cmd"] {
            assert!(spec.parse::<NamedServer>().is_err(), "{spec} was accepted");
        }
    }

    #[test]
    fn a_server_needs_a_command() {
        assert!("tokenmill=".parse::<NamedServer>().is_err());
        assert!("tokenmill".parse::<NamedServer>().is_err());
    }
}
