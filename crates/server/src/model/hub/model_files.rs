//! Which of a repository's files make the model: a safetensors checkpoint's config, text
//! files and weights, or one GGUF file picked by quantization as llama-server's `-hf` picks it.

use super::model_reference::{is_gguf, FileSelector};

/// The quantization taken where a GGUF repository is named without one (llama-server's too).
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// A safetensors checkpoint's files besides its weights, fetched where the repository has them.
const TEXT_FILES: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
];
const SINGLE_WEIGHTS: &str = "model.safetensors";
const WEIGHT_INDEX: &str = "model.safetensors.index.json";

/// What to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    /// One GGUF file; the model is that file.
    Gguf(String),
    /// A Hugging Face checkpoint; the model is the snapshot folder. `files` holds the config,
    /// text files and `model.safetensors` or the shard index; `indexed` says the shards the
    /// index names are to be read from it once fetched.
    Safetensors { files: Vec<String>, indexed: bool },
}

impl ModelFiles {
    /// The files `selector` picks out of a repository holding `files` (paths in the repo).
    pub fn choose(selector: &FileSelector, files: &[String]) -> Result<Self, String> {
        let has = |name: &str| files.iter().any(|f| f == name);
        let ggufs: Vec<&String> = files
            .iter()
            .filter(|f| is_gguf(f) && !basename(f).to_ascii_lowercase().contains("mmproj"))
            .collect();
        let listing = || {
            if ggufs.is_empty() {
                "it has no GGUF file".to_owned()
            } else {
                let names: Vec<&str> = ggufs.iter().map(|f| f.as_str()).collect();
                format!("its GGUF files: {}", names.join(", "))
            }
        };
        match selector {
            FileSelector::File(file) if has(file) => Ok(Self::Gguf(gguf_single(file)?)),
            FileSelector::File(file) => Err(format!("it has no file {file}; {}", listing())),
            FileSelector::Quant(tag) => match with_quant(&ggufs, tag) {
                Some(file) => Ok(Self::Gguf(gguf_single(file)?)),
                None => Err(format!(
                    "it has no GGUF file of quantization {tag}; {}",
                    listing()
                )),
            },
            FileSelector::Default if has("config.json") && has(SINGLE_WEIGHTS) => {
                Ok(Self::safetensors(files, SINGLE_WEIGHTS, false))
            }
            FileSelector::Default if has("config.json") && has(WEIGHT_INDEX) => {
                Ok(Self::safetensors(files, WEIGHT_INDEX, true))
            }
            FileSelector::Default => {
                // As llama-server: the default quantization, else the first GGUF file.
                let first = with_quant(&ggufs, DEFAULT_QUANT).or_else(|| {
                    let mut sorted = ggufs.clone();
                    sorted.sort();
                    sorted
                        .into_iter()
                        .find(|f| shard_of(f).is_none_or(|n| n == 1))
                });
                match first {
                    Some(file) => Ok(Self::Gguf(gguf_single(file)?)),
                    None => Err(format!(
                        "it has neither config.json with {SINGLE_WEIGHTS} or {WEIGHT_INDEX} \
                         nor a GGUF file"
                    )),
                }
            }
        }
    }

    fn safetensors(files: &[String], weights: &str, indexed: bool) -> Self {
        let mut chosen: Vec<String> = TEXT_FILES
            .iter()
            .filter(|name| files.iter().any(|f| f == *name))
            .map(|name| name.to_string())
            .collect();
        chosen.push(weights.to_owned());
        Self::Safetensors {
            files: chosen,
            indexed,
        }
    }

    /// The shard files a fetched `model.safetensors.index.json` names, each once, in order.
    pub fn shards_of_index(index_json: &str) -> Result<Vec<String>, String> {
        #[derive(serde::Deserialize)]
        struct Index {
            weight_map: std::collections::BTreeMap<String, String>,
        }
        let index: Index = serde_json::from_str(index_json)
            .map_err(|e| format!("{WEIGHT_INDEX} is not a shard index: {e}"))?;
        let mut shards: Vec<String> = index.weight_map.into_values().collect();
        shards.sort();
        shards.dedup();
        if let Some(bad) = shards
            .iter()
            .find(|s| s.starts_with('/') || s.split('/').any(|part| part == ".."))
        {
            return Err(format!(
                "{WEIGHT_INDEX} names a shard outside the repository: {bad}"
            ));
        }
        Ok(shards)
    }
}

/// The file name after the repository's folders.
fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The GGUF whose name, less `.gguf` and a split suffix, ends in `tag` after a separator (so
/// `Q4_K` does not pick `Q4_K_M`); the first of a split file, the first by name of several.
fn with_quant<'a>(ggufs: &[&'a String], tag: &str) -> Option<&'a String> {
    let tag = tag.to_ascii_lowercase();
    let mut matching: Vec<&'a String> = ggufs
        .iter()
        .copied()
        .filter(|file| {
            let lower = file.to_ascii_lowercase();
            let stem = lower.strip_suffix(".gguf").unwrap_or(&lower);
            let stem = match shard_of(file) {
                Some(_) => stem.get(..stem.len().saturating_sub(15)).unwrap_or(stem),
                None => stem,
            };
            stem.strip_suffix(tag.as_str())
                .is_some_and(|before| before.is_empty() || before.ends_with(['-', '.', '_', '/']))
        })
        .filter(|file| shard_of(file).is_none_or(|n| n == 1))
        .collect();
    matching.sort();
    matching.first().copied()
}

/// `n` for a split GGUF file named `...-0000n-of-0000m.gguf`.
fn shard_of(file: &str) -> Option<u32> {
    let stem = file.get(..file.len().checked_sub(5)?)?;
    let tail = stem.get(stem.len().checked_sub(15)?..)?;
    let (n, of) = tail.strip_prefix('-')?.split_once("-of-")?;
    if n.len() == 5 && of.len() == 5 && of.bytes().all(|b| b.is_ascii_digit()) {
        n.parse().ok()
    } else {
        None
    }
}

/// The engine reads one GGUF file, so a split one is refused by name.
fn gguf_single(file: &str) -> Result<String, String> {
    match shard_of(file) {
        Some(_) => Err(format!(
            "{file} is the first part of a split GGUF, which tokenmill does not read: merge the \
             parts with llama.cpp's llama-gguf-split --merge and serve the file"
        )),
        None => Ok(file.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn gguf(selector: FileSelector, names: &[&str]) -> Result<ModelFiles, String> {
        ModelFiles::choose(&selector, &files(names))
    }

    const QUANTS: [&str; 5] = [
        "README.md",
        "m-Q4_K.gguf",
        "m-Q4_K_M.gguf",
        "m-Q8_0.gguf",
        "mmproj-m-Q4_K_M.gguf",
    ];

    #[test]
    fn a_quantization_tag_picks_the_file_ending_in_it_and_no_longer_tag() {
        let pick = |tag: &str| gguf(FileSelector::Quant(tag.into()), &QUANTS);
        assert_eq!(pick("Q4_K"), Ok(ModelFiles::Gguf("m-Q4_K.gguf".into())));
        assert_eq!(pick("q4_k_m"), Ok(ModelFiles::Gguf("m-Q4_K_M.gguf".into())));
        let missing = pick("Q5_0").unwrap_err();
        assert!(
            missing.contains("Q5_0") && missing.contains("m-Q8_0.gguf"),
            "{missing}"
        );
        assert!(!missing.contains("mmproj"), "{missing}");
    }

    #[test]
    fn no_tag_takes_q4_k_m_else_the_first_gguf() {
        assert_eq!(
            gguf(FileSelector::Default, &QUANTS),
            Ok(ModelFiles::Gguf("m-Q4_K_M.gguf".into()))
        );
        assert_eq!(
            gguf(FileSelector::Default, &["b-Q8_0.gguf", "a-F16.gguf"]),
            Ok(ModelFiles::Gguf("a-F16.gguf".into()))
        );
    }

    #[test]
    fn a_safetensors_checkpoint_takes_its_text_files_and_weights_only() {
        let chosen = gguf(
            FileSelector::Default,
            &[
                "config.json",
                "model.safetensors",
                "model-f32.gguf",
                "reference.json",
                "tokenizer.json",
                "tokenizer_config.json",
            ],
        );
        assert_eq!(
            chosen,
            Ok(ModelFiles::Safetensors {
                files: files(&[
                    "config.json",
                    "tokenizer.json",
                    "tokenizer_config.json",
                    "model.safetensors"
                ]),
                indexed: false
            })
        );
    }

    #[test]
    fn a_sharded_checkpoint_takes_its_index_then_the_shards_it_names() {
        let chosen = gguf(
            FileSelector::Default,
            &[
                "config.json",
                "model.safetensors.index.json",
                "a.safetensors",
            ],
        );
        assert_eq!(
            chosen,
            Ok(ModelFiles::Safetensors {
                files: files(&["config.json", "model.safetensors.index.json"]),
                indexed: true
            })
        );
        let index = r#"{"metadata": {}, "weight_map": {"a": "m-00002-of-00002.safetensors",
            "b": "m-00001-of-00002.safetensors", "c": "m-00001-of-00002.safetensors"}}"#;
        assert_eq!(
            ModelFiles::shards_of_index(index),
            Ok(files(&[
                "m-00001-of-00002.safetensors",
                "m-00002-of-00002.safetensors"
            ]))
        );
        let outside = r#"{"weight_map": {"a": "../x.safetensors"}}"#;
        assert!(ModelFiles::shards_of_index(outside).is_err());
    }

    #[test]
    fn a_split_gguf_is_refused_by_name() {
        let err = gguf(
            FileSelector::Quant("Q4_K_M".into()),
            &[
                "m-Q4_K_M-00001-of-00002.gguf",
                "m-Q4_K_M-00002-of-00002.gguf",
            ],
        )
        .unwrap_err();
        assert!(
            err.contains("m-Q4_K_M-00001-of-00002.gguf") && err.contains("split"),
            "{err}"
        );
    }

    #[test]
    fn a_named_file_must_be_in_the_repository() {
        assert_eq!(
            gguf(FileSelector::File("m-Q8_0.gguf".into()), &QUANTS),
            Ok(ModelFiles::Gguf("m-Q8_0.gguf".into()))
        );
        assert!(gguf(FileSelector::File("x.gguf".into()), &QUANTS).is_err());
    }
}
