//! `HfOverrides`: vLLM's `--hf-overrides`, a JSON object of Hugging Face config keys laid
//! over the checkpoint's config before the weights load (e.g. fewer layers of a model too
//! big for the machine). Only keys we can honour are accepted; any other is refused by name.

use crate::config::model_config::ModelConfig;
use serde_json::{Map, Value};

/// The keys we apply, by their Hugging Face names.
const SUPPORTED: &str = "num_hidden_layers, max_position_embeddings, num_experts_per_tok";

#[derive(Debug, Clone, Default, PartialEq)]
pub struct HfOverrides(Map<String, Value>);

impl std::str::FromStr for HfOverrides {
    type Err = String;

    /// A JSON object whose every key is one we apply, with a positive integer value.
    fn from_str(s: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(s).map_err(|e| format!("not valid JSON ({e}): {s}"))?;
        let Value::Object(map) = value else {
            return Err(format!("must be a JSON object of config keys, got {s}"));
        };
        for (key, value) in &map {
            if !SUPPORTED.split(", ").any(|k| k == key) {
                return Err(format!(
                    "key {key:?} is not supported (supported: {SUPPORTED})"
                ));
            }
            if value.as_u64().is_none_or(|v| v == 0) {
                return Err(format!("{key} must be a positive integer, got {value}"));
            }
        }
        Ok(Self(map))
    }
}

impl std::fmt::Display for HfOverrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", Value::Object(self.0.clone()))
    }
}

impl HfOverrides {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Lays the overrides over `config`, or says why the result cannot run.
    pub fn apply(&self, config: &mut ModelConfig) -> Result<(), String> {
        for (key, value) in &self.0 {
            let v = value
                .as_u64()
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| format!("{key} must be a positive integer, got {value}"))?;
            match key.as_str() {
                "num_hidden_layers" => config.num_layers = v,
                "max_position_embeddings" => config.max_position_embeddings = v,
                "num_experts_per_tok" => {
                    let moe = config
                        .moe
                        .as_mut()
                        .ok_or("num_experts_per_tok applies only to a mixture-of-experts model")?;
                    moe.experts_per_token = v;
                    moe.validate()?;
                }
                other => {
                    return Err(format!(
                        "key {other:?} is not supported (supported: {SUPPORTED})"
                    ))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_hidden_layers_replaces_the_layer_count() {
        let o: HfOverrides = r#"{"num_hidden_layers": 8}"#.parse().unwrap();
        let mut c = ModelConfig::qwen3_30b_a3b();
        o.apply(&mut c).unwrap();
        assert_eq!(c.num_layers, 8);
        assert_eq!(c.moe.unwrap().num_experts, 128, "the rest is kept");
    }

    #[test]
    fn bad_overrides_are_refused_with_the_reason() {
        for (text, want) in [
            ("[1]", "must be a JSON object"),
            ("{nope", "not valid JSON"),
            (r#"{"hidden_size": 8}"#, "\"hidden_size\" is not supported"),
            (r#"{"num_hidden_layers": 0}"#, "positive integer"),
            (r#"{"num_hidden_layers": "8"}"#, "positive integer"),
        ] {
            let err = text.parse::<HfOverrides>().unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn more_experts_per_token_than_experts_or_on_a_dense_model_is_refused() {
        let o: HfOverrides = r#"{"num_experts_per_tok": 129}"#.parse().unwrap();
        assert!(o.apply(&mut ModelConfig::qwen3_30b_a3b()).is_err());
        assert!(o.apply(&mut ModelConfig::qwen3_0_6b()).is_err());
    }
}
