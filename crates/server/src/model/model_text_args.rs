//! `ModelTextArgs`: the flags that replace what the checkpoint says about text, named as vLLM
//! names them: `--tokenizer`, `--chat-template` and `--generation-config`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;

use crate::text::generation_config::GenerationConfigSource;

#[derive(Args, Debug, Clone, Default)]
pub struct ModelTextArgs {
    /// A tokenizer to use instead of the checkpoint's: a Hugging Face `tokenizer.json`, a folder
    /// holding one (its `tokenizer_config.json`, when present, gives BOS/EOS and a chat
    /// template), or a GGUF file whose tokenizer metadata is read.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// The chat template: a file, or the Jinja text itself. As in vLLM, a value that names an
    /// existing file is read; any other is the template.
    #[arg(long, value_name = "FILE_OR_JINJA")]
    pub chat_template: Option<String>,
    /// Request defaults from a `generation_config.json` (temperature, top_p, top_k, min_p,
    /// repetition_penalty, max_new_tokens), used where a request leaves them unset: `auto`
    /// reads the checkpoint folder's, `vllm` reads none, any other value is a folder holding one.
    #[arg(long, value_name = "auto|vllm|FOLDER", default_value = "auto")]
    pub generation_config: GenerationConfigSource,
}

impl ModelTextArgs {
    /// `--chat-template`'s Jinja source: the file it names, or the value itself.
    pub fn chat_template_source(&self) -> anyhow::Result<Option<String>> {
        self.chat_template
            .as_deref()
            .map(chat_template_source)
            .transpose()
    }
}

fn chat_template_source(value: &str) -> anyhow::Result<String> {
    let path = Path::new(value);
    if path.is_file() {
        return std::fs::read_to_string(path)
            .with_context(|| format!("--chat-template {value}: cannot read the file"));
    }
    // Every template has a tag or an expression; a value with neither was meant as a path.
    if !value.contains(['{', '}', '\n']) {
        bail!(
            "--chat-template {value}: no such file, and not a Jinja template either (it has no \
             `{{` or `}}`); give a template file or the template's text"
        );
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_naming_a_file_is_read_and_any_other_template_is_taken_as_it_is() {
        let path =
            std::env::temp_dir().join(format!("tokenmill-template-{}.jinja", std::process::id()));
        std::fs::write(&path, "{{ messages[0].content }}").unwrap();
        assert_eq!(
            chat_template_source(path.to_str().unwrap()).unwrap(),
            "{{ messages[0].content }}"
        );
        assert_eq!(
            chat_template_source("{% for m in messages %}{{ m.content }}{% endfor %}").unwrap(),
            "{% for m in messages %}{{ m.content }}{% endfor %}"
        );
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_path_that_names_no_file_is_refused_rather_than_rendered_as_text() {
        let err = chat_template_source("templates/chatml.jinja")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--chat-template templates/chatml.jinja"),
            "{err}"
        );
        assert!(err.contains("no such file"), "{err}");
    }
}
