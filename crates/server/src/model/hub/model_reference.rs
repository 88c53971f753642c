//! A model named by its Hub repository, as `--model` spells it: `org/repo` (the safetensors
//! weights, or the repository's default GGUF), `org/repo:Q4_K_M` (the GGUF of that
//! quantization, as llama-server's `-hf` picks it) or `org/repo/path/file.gguf` (that file).

use std::fmt;

/// Longest repository name part the Hub accepts.
const MAX_NAME_LEN: usize = 96;

/// Which files of the repository make the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSelector {
    /// The safetensors weights if the repository has them, else its default GGUF.
    Default,
    /// The GGUF file whose name ends in this quantization tag (`Q4_K_M`, `UD-Q4_K_XL`).
    Quant(String),
    /// This GGUF file, by its path in the repository.
    File(String),
}

/// `org/repo` with what to take from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReference {
    /// `org/repo`, as the Hub's URLs and the cache's folder names spell it.
    pub repo_id: String,
    pub selector: FileSelector,
}

impl ModelReference {
    /// The reference `text` spells, or `None` where it is not one (a path such as `model.gguf`,
    /// `./dir`, `/abs/file`, `dir/model.gguf`): those stay local paths.
    pub fn parse(text: &str) -> Option<Self> {
        if text.starts_with(['.', '/', '~', '\\']) || text.contains('\\') {
            return None;
        }
        let (path, tag) = match text.split_once(':') {
            Some((path, tag)) => (path, Some(tag)),
            None => (text, None),
        };
        let mut parts = path.split('/');
        let (owner, name) = (parts.next()?, parts.next()?);
        if !valid_name(owner) || !valid_name(name) {
            return None;
        }
        let file: Vec<&str> = parts.collect();
        let repo_id = format!("{owner}/{name}");
        let selector = match (file.is_empty(), tag) {
            // `dir/model.gguf` is a local file that is missing, not a repository.
            (true, _) if is_gguf(name) => return None,
            (true, None) => FileSelector::Default,
            (true, Some(tag)) if valid_tag(tag) => FileSelector::Quant(tag.to_owned()),
            (true, Some(_)) => return None,
            (false, None) => {
                let file = file.join("/");
                let clean = file
                    .split('/')
                    .all(|part| !part.is_empty() && part != "." && part != "..");
                if !clean || !is_gguf(&file) {
                    return None;
                }
                FileSelector::File(file)
            }
            (false, Some(_)) => return None,
        };
        Some(Self { repo_id, selector })
    }
}

impl fmt::Display for ModelReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.selector {
            FileSelector::Default => write!(f, "{}", self.repo_id),
            FileSelector::Quant(tag) => write!(f, "{}:{tag}", self.repo_id),
            FileSelector::File(file) => write!(f, "{}/{file}", self.repo_id),
        }
    }
}

pub(crate) fn is_gguf(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".gguf")
}

/// The Hub's rule for an owner or a repository name: letters, digits, `-`, `_`, `.`, not
/// starting or ending with `-` or `.`, no `--` or `..`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.'])
        && !name.contains("--")
        && !name.contains("..")
}

fn valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ModelReference {
        ModelReference::parse(text).unwrap_or_else(|| panic!("{text} is a reference"))
    }

    #[test]
    fn a_repository_alone_takes_its_default_files() {
        let reference = parsed("Qwen/Qwen3-0.6B");
        assert_eq!(reference.repo_id, "Qwen/Qwen3-0.6B");
        assert_eq!(reference.selector, FileSelector::Default);
    }

    #[test]
    fn a_tag_after_a_colon_names_the_quantization() {
        let reference = parsed("ggml-org/gemma-3-1b-it-GGUF:Q4_K_M");
        assert_eq!(reference.repo_id, "ggml-org/gemma-3-1b-it-GGUF");
        assert_eq!(reference.selector, FileSelector::Quant("Q4_K_M".into()));
        assert_eq!(reference.to_string(), "ggml-org/gemma-3-1b-it-GGUF:Q4_K_M");
    }

    #[test]
    fn a_path_after_the_repository_names_one_gguf_file() {
        let reference = parsed("org/repo-GGUF/sub/model-Q8_0.gguf");
        assert_eq!(reference.repo_id, "org/repo-GGUF");
        assert_eq!(
            reference.selector,
            FileSelector::File("sub/model-Q8_0.gguf".into())
        );
        assert_eq!(reference.to_string(), "org/repo-GGUF/sub/model-Q8_0.gguf");
    }

    #[test]
    fn local_looking_paths_are_not_references() {
        for text in [
            "model.gguf",
            "./org/repo",
            "/models/org/repo",
            "~/org/repo",
            "models/model.gguf",
            "org/repo/config.json",
            "org/repo/../x.gguf",
            "org/repo/a.gguf:Q4_0",
            "org/repo:",
            "org/-repo",
            "org/re--po",
            "org//repo",
            "C:\\models\\x",
        ] {
            assert_eq!(ModelReference::parse(text), None, "{text}");
        }
    }
}
