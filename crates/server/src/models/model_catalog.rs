//! `ModelSpec`: a model a server can serve, by name, and where it comes from: each `--model
//! NAME=SOURCE` (a bare source is named as a server of that model alone names it), and every
//! GGUF file or model folder in `--models-dir`.

use std::path::Path;

use anyhow::{bail, Context};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// What clients send as `model`.
    pub name: String,
    /// A path, or a Hugging Face Hub name (`org/repo[:QUANT]`), as `--model` takes it.
    pub source: String,
}

impl ModelSpec {
    /// `NAME=SOURCE`, or a bare source. A name holds no `/`, so a path or Hub name that has
    /// a `=` in it is still read whole.
    pub fn parse(text: &str) -> Self {
        if let Some((name, source)) = text.split_once('=') {
            if !name.is_empty() && !name.contains('/') && !source.is_empty() {
                return Self {
                    name: name.to_owned(),
                    source: source.to_owned(),
                };
            }
        }
        Self {
            name: default_name(text),
            source: text.to_owned(),
        }
    }
}

/// A local file's stem or a folder's name; a Hub name as typed (as vLLM names it).
fn default_name(source: &str) -> String {
    let path = Path::new(source);
    if !path.exists() {
        return source.to_owned();
    }
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| source.to_owned())
}

/// Every model of `--model` (in order) and then of `--models-dir` (by name); a name given
/// twice is refused, since a request could reach only one of them.
pub fn catalog(models: &[String], dir: Option<&Path>) -> anyhow::Result<Vec<ModelSpec>> {
    let mut specs: Vec<ModelSpec> = models.iter().map(|m| ModelSpec::parse(m)).collect();
    if let Some(dir) = dir {
        let found = models_in(dir)?;
        if found.is_empty() {
            bail!(
                "--models-dir {}: no GGUF file and no model folder (one with a config.json) in it",
                dir.display()
            );
        }
        specs.extend(found);
    }
    for (i, spec) in specs.iter().enumerate() {
        if specs[..i].iter().any(|other| other.name == spec.name) {
            bail!(
                "two models are named `{}`: name them apart with --model NAME=PATH",
                spec.name
            );
        }
    }
    Ok(specs)
}

/// The GGUF files and model folders directly in `dir`, sorted by name.
fn models_in(dir: &Path) -> anyhow::Result<Vec<ModelSpec>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("--models-dir {}", dir.display()))?;
    let mut specs = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("--models-dir {}", dir.display()))?
            .path();
        let is_gguf = path.is_file() && path.extension().is_some_and(|e| e == "gguf");
        let is_folder = path.is_dir() && path.join("config.json").is_file();
        if is_gguf || is_folder {
            let source = path.display().to_string();
            specs.push(ModelSpec {
                name: default_name(&source),
                source,
            });
        }
    }
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_model_splits_at_the_first_equals_sign_and_a_path_with_a_slash_stays_whole() {
        assert_eq!(
            ModelSpec::parse("small=org/repo:Q4_K_M"),
            ModelSpec {
                name: "small".into(),
                source: "org/repo:Q4_K_M".into()
            }
        );
        let whole = ModelSpec::parse("models/a=b.gguf");
        assert_eq!(whole.source, "models/a=b.gguf");
        assert_eq!(whole.name, "models/a=b.gguf");
    }

    #[test]
    fn a_models_dir_gives_each_gguf_file_and_model_folder_its_name() {
        let dir = std::env::temp_dir().join(format!("tokenmill-models-dir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("folder-model")).unwrap();
        std::fs::write(dir.join("folder-model/config.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("not-a-model")).unwrap();
        std::fs::write(dir.join("b.gguf"), "").unwrap();
        std::fs::write(dir.join("notes.txt"), "").unwrap();
        let specs = catalog(&[], Some(&dir)).unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["b", "folder-model"]);
        let twice = catalog(&["b=x.gguf".into()], Some(&dir)).unwrap_err();
        assert!(
            twice.to_string().contains("two models are named `b`"),
            "{twice}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
