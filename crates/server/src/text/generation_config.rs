//! `GenerationConfig`: a model's `generation_config.json` read as request defaults
//! (`--generation-config`, as vLLM's flag): the sampling settings its authors chose, used
//! wherever a request leaves them unset.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_json::Value;

const FILE_NAME: &str = "generation_config.json";

/// Where `--generation-config` takes its defaults from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GenerationConfigSource {
    /// The checkpoint directory's `generation_config.json`, when it has one (a GGUF file carries none).
    #[default]
    Auto,
    /// None: tokenmill's own defaults (vLLM's name for this choice).
    Vllm,
    /// The `generation_config.json` in this folder, which must exist.
    Folder(PathBuf),
}

impl FromStr for GenerationConfigSource {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(match value {
            "auto" => Self::Auto,
            "vllm" => Self::Vllm,
            folder => Self::Folder(PathBuf::from(folder)),
        })
    }
}

/// The defaults a `generation_config.json` sets; `None` where it sets nothing (or `null`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationConfig {
    /// The file they came from, for the startup log; `None` when nothing was read.
    pub origin: Option<PathBuf>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Transformers' `top_k`; 0 disables it, as vLLM's -1 does.
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// `max_new_tokens`: a cap on a reply that asks for no length of its own.
    pub max_new_tokens: Option<usize>,
    /// Ids that end a reply besides the engine's EOS, as EOS does (a request's `ignore_eos`
    /// turns them off too): the file's `eos_token_id` list and the tokenizer's end-of-turn
    /// control tokens (`EndOfTurn`). A chat model whose file names only `<eos>` as EOS still
    /// ends its turn at `<end_of_turn>`.
    pub stop_token_ids: Vec<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerationConfigError {
    #[error("--generation-config {folder}: there is no {FILE_NAME} in that folder (give auto, vllm or a folder that has one)")]
    Missing { folder: PathBuf },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a JSON object: {message}")]
    Json { path: PathBuf, message: String },
    #[error("{path}: `{key}` is {value}, but it must be {expected}")]
    BadValue {
        path: PathBuf,
        key: &'static str,
        // Boxed: the JSON value would make every `Result` carrying this error large.
        value: Box<Value>,
        expected: &'static str,
    },
}

impl GenerationConfig {
    /// The defaults `source` names; `checkpoint` is what `--model` loaded (`None` for dummy weights).
    pub fn load(
        source: &GenerationConfigSource,
        checkpoint: Option<&Path>,
    ) -> Result<Self, GenerationConfigError> {
        match source {
            GenerationConfigSource::Vllm => Ok(Self::default()),
            GenerationConfigSource::Auto => match checkpoint {
                Some(dir) if dir.is_dir() && dir.join(FILE_NAME).is_file() => {
                    Self::from_file(&dir.join(FILE_NAME))
                }
                _ => Ok(Self::default()),
            },
            GenerationConfigSource::Folder(folder) => {
                let path = folder.join(FILE_NAME);
                if !path.is_file() {
                    return Err(GenerationConfigError::Missing {
                        folder: folder.clone(),
                    });
                }
                Self::from_file(&path)
            }
        }
    }

    /// Reads the keys vLLM takes from the file; the others (`do_sample`, token ids) are left
    /// to the tokenizer and the request.
    pub fn from_file(path: &Path) -> Result<Self, GenerationConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| GenerationConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        let json: serde_json::Map<String, Value> =
            serde_json::from_str(&text).map_err(|e| GenerationConfigError::Json {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        let reader = Reader { path, json: &json };
        Ok(Self {
            origin: Some(path.to_owned()),
            temperature: reader.float("temperature", "a number >= 0", |v| v >= 0.0)?,
            top_p: reader.float("top_p", "a number in (0, 1]", |v| v > 0.0 && v <= 1.0)?,
            top_k: reader.integer("top_k", "an integer >= -1", |v| v >= -1)?,
            min_p: reader.float("min_p", "a number in [0, 1]", |v| (0.0..=1.0).contains(&v))?,
            repetition_penalty: reader.float("repetition_penalty", "a number > 0", |v| v > 0.0)?,
            max_new_tokens: reader
                .integer("max_new_tokens", "an integer >= 1", |v| v >= 1)?
                .map(|v| v as usize),
            stop_token_ids: reader.token_ids("eos_token_id")?,
        })
    }

    /// No default is set: requests are planned as without the file.
    pub fn is_empty(&self) -> bool {
        self.settings().is_empty()
    }

    /// `key=value` for each default set, for the startup log.
    pub fn settings(&self) -> Vec<String> {
        let floats = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repetition_penalty", self.repetition_penalty),
        ];
        let integers = [
            ("top_k", self.top_k),
            ("max_new_tokens", self.max_new_tokens.map(|v| v as i64)),
        ];
        floats
            .iter()
            .filter_map(|(key, v)| v.map(|v| format!("{key}={v}")))
            .chain(
                integers
                    .iter()
                    .filter_map(|(key, v)| v.map(|v| format!("{key}={v}"))),
            )
            .chain(
                (!self.stop_token_ids.is_empty())
                    .then(|| format!("stop_token_ids={:?}", self.stop_token_ids)),
            )
            .collect()
    }

    /// Adds `ids` to the ids that end a reply (kept sorted, each once).
    pub fn also_stop_at(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.stop_token_ids.extend(ids);
        self.stop_token_ids.sort_unstable();
        self.stop_token_ids.dedup();
    }
}

/// Typed reads of one file's keys, so a bad value is named with its file and key.
struct Reader<'a> {
    path: &'a Path,
    json: &'a serde_json::Map<String, Value>,
}

impl Reader<'_> {
    fn value(&self, key: &'static str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    fn bad(
        &self,
        key: &'static str,
        value: &Value,
        expected: &'static str,
    ) -> GenerationConfigError {
        GenerationConfigError::BadValue {
            path: self.path.to_owned(),
            key,
            value: Box::new(value.clone()),
            expected,
        }
    }

    fn float(
        &self,
        key: &'static str,
        expected: &'static str,
        valid: impl Fn(f32) -> bool,
    ) -> Result<Option<f32>, GenerationConfigError> {
        let Some(value) = self.value(key) else {
            return Ok(None);
        };
        match value.as_f64().map(|v| v as f32) {
            Some(v) if v.is_finite() && valid(v) => Ok(Some(v)),
            _ => Err(self.bad(key, value, expected)),
        }
    }

    /// One id or a list of them (transformers writes either).
    fn token_ids(&self, key: &'static str) -> Result<Vec<u32>, GenerationConfigError> {
        const EXPECTED: &str = "a token id or a list of token ids";
        let Some(value) = self.value(key) else {
            return Ok(Vec::new());
        };
        let id = |v: &Value| v.as_u64().and_then(|v| u32::try_from(v).ok());
        let ids = match value {
            Value::Array(items) => items.iter().map(id).collect::<Option<Vec<_>>>(),
            one => id(one).map(|v| vec![v]),
        };
        let mut ids = ids.ok_or_else(|| self.bad(key, value, EXPECTED))?;
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    fn integer(
        &self,
        key: &'static str,
        expected: &'static str,
        valid: impl Fn(i64) -> bool,
    ) -> Result<Option<i64>, GenerationConfigError> {
        let Some(value) = self.value(key) else {
            return Ok(None);
        };
        match value.as_i64() {
            Some(v) if valid(v) => Ok(Some(v)),
            _ => Err(self.bad(key, value, expected)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::generation_request::GenerationRequest;
    use crate::generate::request_plan::{PlanRules, RequestPlan};
    use serde_json::json;
    use tokenmill_engine::EngineLimits;

    fn write(dir: &Path, json: Value) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(FILE_NAME), json.to_string()).unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tokenmill-generation-config-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_seven_keys_are_read_and_others_are_ignored() {
        let dir = scratch("keys");
        write(
            &dir,
            json!({"temperature": 0.7, "top_p": 0.95, "top_k": 64, "min_p": 0.05,
                   "repetition_penalty": 1.1, "max_new_tokens": 32, "do_sample": true,
                   "eos_token_id": [1, 106], "cache_implementation": "hybrid"}),
        );
        let config =
            GenerationConfig::load(&GenerationConfigSource::Folder(dir.clone()), None).unwrap();
        assert_eq!(config.temperature, Some(0.7));
        assert_eq!(config.top_p, Some(0.95));
        assert_eq!(config.top_k, Some(64));
        assert_eq!(config.min_p, Some(0.05));
        assert_eq!(config.repetition_penalty, Some(1.1));
        assert_eq!(config.max_new_tokens, Some(32));
        assert_eq!(config.stop_token_ids, vec![1, 106]);
        assert_eq!(config.origin, Some(dir.join(FILE_NAME)));
    }

    #[test]
    fn auto_reads_the_checkpoint_directory_and_vllm_reads_nothing() {
        let dir = scratch("auto");
        write(&dir, json!({"temperature": 0.5, "top_k": null}));
        let auto = GenerationConfig::load(&GenerationConfigSource::Auto, Some(&dir)).unwrap();
        assert_eq!(auto.temperature, Some(0.5));
        assert_eq!(auto.top_k, None, "null is no default");
        let vllm = GenerationConfig::load(&GenerationConfigSource::Vllm, Some(&dir)).unwrap();
        assert!(vllm.is_empty());
        // A GGUF file (or dummy weights) has no directory of its own to read.
        let gguf = dir.join("model.gguf");
        std::fs::write(&gguf, b"").unwrap();
        let from_file = GenerationConfig::load(&GenerationConfigSource::Auto, Some(&gguf)).unwrap();
        assert!(from_file.is_empty());
        assert!(GenerationConfig::load(&GenerationConfigSource::Auto, None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_folder_without_the_file_and_a_bad_value_are_refused_by_name() {
        let dir = scratch("bad");
        std::fs::create_dir_all(&dir).unwrap();
        let missing = GenerationConfig::load(&GenerationConfigSource::Folder(dir.clone()), None)
            .unwrap_err()
            .to_string();
        assert!(missing.contains("generation_config.json"), "{missing}");
        assert!(missing.contains("auto, vllm"), "{missing}");
        write(&dir, json!({"top_p": 1.5}));
        let bad = GenerationConfig::load(&GenerationConfigSource::Folder(dir), None)
            .unwrap_err()
            .to_string();
        assert!(bad.contains("`top_p` is 1.5"), "{bad}");
        assert!(bad.contains("(0, 1]"), "{bad}");
    }

    #[test]
    fn the_flag_value_names_a_choice_or_a_folder() {
        assert_eq!("auto".parse(), Ok(GenerationConfigSource::Auto));
        assert_eq!("vllm".parse(), Ok(GenerationConfigSource::Vllm));
        assert_eq!(
            "models/gemma".parse(),
            Ok(GenerationConfigSource::Folder(PathBuf::from(
                "models/gemma"
            )))
        );
    }

    fn config() -> GenerationConfig {
        GenerationConfig {
            origin: None,
            temperature: Some(0.25),
            top_p: Some(0.9),
            top_k: Some(40),
            min_p: Some(0.1),
            repetition_penalty: Some(1.3),
            max_new_tokens: Some(5),
            stop_token_ids: vec![7],
        }
    }

    fn planned(body: serde_json::Value) -> RequestPlan {
        let body: GenerationRequest = serde_json::from_value(body).unwrap();
        let limits = EngineLimits {
            vocab_size: 100,
            max_model_len: 64,
            num_kv_blocks: 64,
            block_size: 16,
            kv_capacity: tokenmill_engine::config::KvCapacity {
                num_pages: 64,
                short_context: 1024,
                one_sequence: 1024,
            },
            max_waiting: 8,
            eos_token_ids: vec![0],
        };
        let rules = PlanRules {
            engine: &limits,
            request_limits: &Default::default(),
            defaults: &config(),
        };
        RequestPlan::new(
            &body,
            crate::generate::request_plan::Endpoint::Completions,
            vec![vec![1, 2, 3]],
            &rules,
        )
        .unwrap()
    }

    #[test]
    fn unset_fields_take_the_files_defaults() {
        let params = &planned(json!({})).requests[0].params;
        assert_eq!(params.temperature, 0.25);
        assert_eq!(params.top_p, 0.9);
        assert_eq!(params.top_k, Some(40));
        assert_eq!(params.min_p, 0.1);
        assert_eq!(params.repetition_penalty, 1.3);
        assert_eq!(params.max_tokens, 5);
    }

    #[test]
    fn what_the_request_sets_wins_over_the_file() {
        let params = &planned(json!({"temperature": 1.0, "top_p": 0.5, "top_k": -1,
            "min_p": 0.0, "repetition_penalty": 1.0, "max_tokens": 9}))
        .requests[0]
            .params;
        assert_eq!(params.temperature, 1.0);
        assert_eq!(params.top_p, 0.5);
        assert_eq!(params.top_k, None);
        assert_eq!(params.min_p, 0.0);
        assert_eq!(params.repetition_penalty, 1.0);
        assert_eq!(params.max_tokens, 9);
        let newer = &planned(json!({"max_completion_tokens": 7})).requests[0].params;
        assert_eq!(newer.max_tokens, 7);
    }

    #[test]
    fn the_files_stop_ids_join_the_requests_unless_it_ignores_eos() {
        let params = &planned(json!({"stop_token_ids": [3]})).requests[0].params;
        assert_eq!(
            params.stop_token_ids.iter().copied().collect::<Vec<_>>(),
            [3, 7]
        );
        let ignoring =
            &planned(json!({"stop_token_ids": [3], "ignore_eos": true})).requests[0].params;
        assert_eq!(
            ignoring.stop_token_ids.iter().copied().collect::<Vec<_>>(),
            [3]
        );
    }

    #[test]
    fn a_single_eos_id_is_read_as_a_list_and_a_bad_one_is_named() {
        let dir = scratch("eos");
        write(&dir, json!({"eos_token_id": 2}));
        let source = GenerationConfigSource::Folder(dir.clone());
        assert_eq!(
            GenerationConfig::load(&source, None)
                .unwrap()
                .stop_token_ids,
            vec![2]
        );
        write(&dir, json!({"eos_token_id": [2, "x"]}));
        let err = GenerationConfig::load(&source, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("eos_token_id"), "{err}");
    }
}
