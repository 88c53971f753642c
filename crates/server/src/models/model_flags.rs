//! `ModelFlags`: one model's own engine and text flags in a server of several, given as
//! `--model-flags NAME='--max-model-len 4096 --kv-cache-dtype q8_0'` and laid over the serve
//! command's: the model is built as if its flags were typed after the serve command's own,
//! so every engine and text flag works and a later one wins.

use std::collections::HashMap;
use std::ffi::OsString;

use anyhow::{bail, Context};
use clap::{Command, FromArgMatches, Parser};
use tokenmill_engine::EngineArgs;

use crate::model::model_text_args::ModelTextArgs;
use crate::models::model_catalog::ModelSpec;

/// One `--model-flags` value: the model's name and its flags, split into words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFlags {
    pub name: String,
    pub words: Vec<String>,
}

impl ModelFlags {
    /// `NAME=FLAGS`, FLAGS split as a POSIX shell splits words (quotes keep spaces).
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some((name, flags)) = text.split_once('=') else {
            return Err(format!(
                "`{text}` is not NAME=FLAGS, e.g. small='--max-model-len 4096'"
            ));
        };
        if name.is_empty() {
            return Err(format!("`{text}` names no model before `=`"));
        }
        let words = shlex::split(flags)
            .ok_or_else(|| format!("the flags of `{name}` have an unclosed quote: {flags}"))?;
        Ok(Self {
            name: name.to_owned(),
            words,
        })
    }
}

/// What a model is built from: the engine's and the text's flags.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    pub engine: EngineArgs,
    pub text: ModelTextArgs,
}

/// The flags one model may have of its own: the engine's and the text's, nothing else.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct OwnFlags {
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    text: ModelTextArgs,
}

/// What `settings` lays each model's flags over.
pub struct ServeFlags<'a> {
    /// The serve command's engine and text flags.
    pub base: ModelSettings,
    /// The serve command's clap command, to parse its words again with a model's after them.
    pub command: Command,
    /// The serve command's own words (after `serve`).
    pub words: &'a [OsString],
}

/// Each model's settings: the serve command's, with its `--model-flags` laid over them. A
/// flag that is not an engine or text flag, a bad value, or flags for a name not served is
/// an error naming it.
pub fn settings(
    serve: &ServeFlags,
    specs: &[ModelSpec],
    own_flags: &[ModelFlags],
) -> anyhow::Result<HashMap<String, ModelSettings>> {
    let mut out: HashMap<String, ModelSettings> = specs
        .iter()
        .map(|spec| (spec.name.clone(), serve.base.clone()))
        .collect();
    for own in own_flags {
        let Some(settings) = out.get_mut(&own.name) else {
            let served: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            bail!(
                "--model-flags names `{}`, which is not a model served here (`{}`)",
                own.name,
                served.join("`, `")
            );
        };
        let checked = OwnFlags::try_parse_from(&own.words)
            .map_err(one_line)
            .with_context(|| format!("--model-flags of `{}`", own.name))?;
        if checked.engine.model.is_some() {
            bail!(
                "--model-flags of `{}`: --model is not one of a model's own flags; give its \
                 file as --model {}=PATH",
                own.name,
                own.name
            );
        }
        let words = serve
            .words
            .iter()
            .cloned()
            .chain(own.words.iter().map(OsString::from));
        // Given twice, a flag's later value wins: the model's own.
        let merged = serve
            .command
            .clone()
            .no_binary_name(true)
            .args_override_self(true)
            .try_get_matches_from(words)
            .and_then(|m| {
                Ok(ModelSettings {
                    engine: EngineArgs::from_arg_matches(&m)?,
                    text: ModelTextArgs::from_arg_matches(&m)?,
                })
            })
            .map_err(one_line)
            .with_context(|| {
                format!(
                    "--model-flags of `{}` laid over the serve command's flags",
                    own.name
                )
            })?;
        *settings = merged;
    }
    Ok(out)
}

/// A clap error's first line without its `error: `: startup errors are one line.
fn one_line(error: clap::Error) -> anyhow::Error {
    let text = error.render().to_string();
    let first = text.lines().next().unwrap_or_default();
    anyhow::anyhow!("{}", first.trim_start_matches("error: "))
}

/// The serve command's own words: those after `serve` on this process's command line.
pub fn serve_words() -> anyhow::Result<Vec<OsString>> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let at = argv
        .iter()
        .position(|a| a == "serve")
        .context("--model-flags: the serve command's flags are not on this command line")?;
    Ok(argv[at + 1..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Args;

    /// A stand-in for the serve command: the model flags and one flag that is not a model's.
    #[derive(Args, Debug)]
    #[command(mut_arg("model", |arg| arg.action(clap::ArgAction::Append)))]
    struct Serve {
        #[command(flatten)]
        engine: EngineArgs,
        #[command(flatten)]
        text: ModelTextArgs,
        #[arg(long)]
        port: Option<u16>,
        #[arg(long, value_parser = ModelFlags::parse)]
        model_flags: Vec<ModelFlags>,
    }

    fn settings_of(words: &[&str]) -> anyhow::Result<HashMap<String, ModelSettings>> {
        let command = Serve::augment_args(Command::new("serve"));
        let m = command
            .clone()
            .no_binary_name(true)
            .try_get_matches_from(words)
            .unwrap();
        let parsed = Serve::from_arg_matches(&m).unwrap();
        let os: Vec<OsString> = words.iter().map(OsString::from).collect();
        let serve = ServeFlags {
            base: ModelSettings {
                engine: parsed.engine,
                text: parsed.text,
            },
            command,
            words: &os,
        };
        settings(&serve, &[spec("a"), spec("b")], &parsed.model_flags)
    }

    fn spec(name: &str) -> ModelSpec {
        ModelSpec {
            name: name.into(),
            source: format!("{name}.gguf"),
        }
    }

    #[test]
    fn a_models_flags_are_split_as_a_shell_splits_them() {
        let flags = ModelFlags::parse("b=--max-model-len 64 --chat-template '{{ a b }}'").unwrap();
        assert_eq!(flags.name, "b");
        assert_eq!(
            flags.words,
            ["--max-model-len", "64", "--chat-template", "{{ a b }}"]
        );
        assert!(ModelFlags::parse("--max-model-len 64").is_err());
        assert!(ModelFlags::parse("b='--max-model-len 64").is_err());
    }

    #[test]
    fn a_models_own_flags_override_the_serve_commands_and_the_rest_are_inherited() {
        let words = [
            "--model",
            "a=a.gguf",
            "--model",
            "b=b.gguf",
            "--max-model-len",
            "128",
            "--max-num-seqs",
            "7",
            "--model-flags",
            "b=--max-model-len 64 --kv-cache-dtype q8_0",
        ];
        let all = settings_of(&words).unwrap();
        assert_eq!(all["a"].engine.max_model_len, Some(128));
        assert_eq!(all["b"].engine.max_model_len, Some(64));
        assert_eq!(all["b"].engine.max_num_seqs, 7);
        assert_ne!(
            format!("{:?}", all["a"].engine.kv_cache_dtype),
            format!("{:?}", all["b"].engine.kv_cache_dtype)
        );
    }

    #[test]
    fn a_bad_flag_and_an_unknown_name_are_errors_naming_the_model() {
        for (flags, expected) in [
            ("b=--max-model-len many", "--model-flags of `b`"),
            ("b=--port 9000", "--model-flags of `b`"),
            (
                "b=--model x.gguf",
                "--model is not one of a model's own flags",
            ),
            (
                "c=--max-model-len 64",
                "names `c`, which is not a model served here",
            ),
        ] {
            let words = [
                "--model",
                "a=a.gguf",
                "--model",
                "b=b.gguf",
                "--model-flags",
                flags,
            ];
            let error = settings_of(&words).unwrap_err();
            assert!(
                format!("{error:#}").contains(expected),
                "{flags}: {error:#}"
            );
        }
    }
}
