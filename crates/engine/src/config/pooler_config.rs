//! `PoolerConfig`: how an embedding request's final hidden states become one vector, as
//! vLLM's `--pooler-config` spells it (JSON): the last token's state or the mean of every
//! position's, L2-normalized unless `normalize` is false.

use super::config_error::ConfigError;
use serde::Deserialize;

/// Which final hidden states make the embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolingType {
    /// The last prompt position's: for a causal decoder the only state that has seen the
    /// whole input, and vLLM's default for decoder models served as embedders.
    Last,
    /// The mean over every prompt position.
    Mean,
}

impl PoolingType {
    /// The name as vLLM writes it (`LAST`, `MEAN`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Last => "LAST",
            Self::Mean => "MEAN",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolerConfig {
    pub pooling_type: PoolingType,
    /// Divide the pooled vector by its L2 norm (vLLM's default, and what cosine-similarity
    /// retrieval expects).
    pub normalize: bool,
}

impl Default for PoolerConfig {
    fn default() -> Self {
        Self {
            pooling_type: PoolingType::Last,
            normalize: true,
        }
    }
}

/// The JSON as users write it; unknown keys are refused so a typo is not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    pooling_type: Option<String>,
    normalize: Option<bool>,
    /// Accepted only to refuse it by name: a decoder model has no Matryoshka training.
    dimensions: Option<serde_json::Value>,
}

const SETTING: &str = "pooler_config";

impl PoolerConfig {
    /// Parses and checks `--pooler-config`; every refusal names the key and why.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let err = |reason: String| ConfigError::new(SETTING, text, reason);
        let raw: Raw = serde_json::from_str(text).map_err(|e| err(format!("not valid: {e}")))?;
        if raw.dimensions.is_some() {
            return Err(err(
                "dimensions needs a model trained for shortened (Matryoshka) embeddings; the \
                 decoder models served here are not"
                    .into(),
            ));
        }
        let pooling_type = match raw.pooling_type.as_deref().map(str::to_ascii_uppercase) {
            None => PoolingType::Last,
            Some(name) if name == "LAST" => PoolingType::Last,
            Some(name) if name == "MEAN" => PoolingType::Mean,
            Some(name) => {
                return Err(err(format!(
                    "pooling_type {name} is not served: LAST or MEAN (a decoder's first token \
                     has seen nothing else, so CLS means nothing here)"
                )))
            }
        };
        Ok(Self {
            pooling_type,
            normalize: raw.normalize.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllms_spelling_parses_and_defaults_to_normalized_last_token() {
        assert_eq!(
            PoolerConfig::from_json("{}").unwrap(),
            PoolerConfig::default()
        );
        let mean = PoolerConfig::from_json(r#"{"pooling_type": "MEAN", "normalize": false}"#);
        assert_eq!(
            mean.unwrap(),
            PoolerConfig {
                pooling_type: PoolingType::Mean,
                normalize: false
            }
        );
    }

    #[test]
    fn unknown_keys_other_poolings_and_dimensions_are_refused_by_name() {
        for (json, named) in [
            (r#"{"pooling": "MEAN"}"#, "pooling"),
            (r#"{"pooling_type": "CLS"}"#, "CLS"),
            (r#"{"dimensions": 32}"#, "dimensions"),
        ] {
            let e = PoolerConfig::from_json(json).unwrap_err();
            assert_eq!(e.setting, "pooler_config");
            assert!(e.reason.contains(named), "{json}: {}", e.reason);
        }
    }
}
