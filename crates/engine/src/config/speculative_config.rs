//! `SpeculativeConfig`: `--speculative-config` as vLLM spells it (JSON), validated at startup.

use super::config_error::ConfigError;
use super::hf_overrides::HfOverrides;
use serde::Deserialize;

/// How drafts are proposed, with each method's own settings.
#[derive(Debug, Clone, PartialEq)]
pub enum SpeculativeMethod {
    /// Prompt lookup: the longest n-gram (`prompt_lookup_max` down to `prompt_lookup_min`)
    /// ending the sequence that occurred earlier in its prompt or output; the tokens that
    /// followed it are the draft.
    Ngram {
        prompt_lookup_min: usize,
        prompt_lookup_max: usize,
    },
    /// SuffixDecoding: suffix trees over the request itself and over recent requests' outputs.
    Suffix(SuffixSettings),
    /// A smaller checkpoint with the same tokenizer, run by the same engine.
    DraftModel {
        model: String,
        /// `--hf-overrides`-style keys laid over the draft's config (e.g.
        /// `{"num_hidden_layers": 2}`: the target's first two layers as the draft).
        hf_overrides: Option<HfOverrides>,
    },
}

/// SuffixDecoding's knobs, named as Arctic Inference and vLLM name them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SuffixSettings {
    /// Longest suffix matched, and deepest path kept, in the trees.
    pub max_tree_depth: usize,
    /// Finished requests whose outputs the global tree keeps (oldest dropped first).
    pub max_cached_requests: usize,
    /// A match of length m drafts at most `max_spec_factor * m` tokens.
    pub max_spec_factor: f64,
    /// A drafted path stops where its estimated probability falls below this.
    pub min_token_prob: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpeculativeConfig {
    pub method: SpeculativeMethod,
    /// The most drafts one sequence verifies in a step; the step cost model picks fewer
    /// (down to none) where a longer verify would cost more than it saves.
    pub num_speculative_tokens: usize,
}

/// The JSON as users write it; unknown keys are refused so a typo is not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    method: Option<String>,
    num_speculative_tokens: Option<usize>,
    prompt_lookup_min: Option<usize>,
    prompt_lookup_max: Option<usize>,
    suffix_decoding_max_tree_depth: Option<usize>,
    suffix_decoding_max_cached_requests: Option<usize>,
    suffix_decoding_max_spec_factor: Option<f64>,
    suffix_decoding_min_token_prob: Option<f64>,
    model: Option<String>,
    hf_overrides: Option<serde_json::Value>,
}

const SETTING: &str = "speculative_config";

/// Most drafts per sequence and step: beyond this a verify chunk is a prefill, and
/// acceptance that long is rare.
pub const MAX_SPECULATIVE_TOKENS: usize = 32;

impl SpeculativeConfig {
    /// Parses and checks `--speculative-config`; every refusal names the key and why.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let err = |reason: String| ConfigError::new(SETTING, text, reason);
        let raw: Raw = serde_json::from_str(text).map_err(|e| err(format!("not valid: {e}")))?;
        let method = raw.method.as_deref().unwrap_or(match raw.model {
            Some(_) => "draft_model",
            None => "",
        });
        let k = raw
            .num_speculative_tokens
            .ok_or_else(|| err("num_speculative_tokens is required".into()))?;
        if k == 0 || k > MAX_SPECULATIVE_TOKENS {
            return Err(err(format!(
                "num_speculative_tokens must be 1..={MAX_SPECULATIVE_TOKENS}, got {k}"
            )));
        }
        let only = |allowed: &[&str]| -> Result<(), ConfigError> {
            let given = [
                ("prompt_lookup_min", raw.prompt_lookup_min.is_some()),
                ("prompt_lookup_max", raw.prompt_lookup_max.is_some()),
                (
                    "suffix_decoding_max_tree_depth",
                    raw.suffix_decoding_max_tree_depth.is_some(),
                ),
                (
                    "suffix_decoding_max_cached_requests",
                    raw.suffix_decoding_max_cached_requests.is_some(),
                ),
                (
                    "suffix_decoding_max_spec_factor",
                    raw.suffix_decoding_max_spec_factor.is_some(),
                ),
                (
                    "suffix_decoding_min_token_prob",
                    raw.suffix_decoding_min_token_prob.is_some(),
                ),
                ("model", raw.model.is_some()),
                ("hf_overrides", raw.hf_overrides.is_some()),
            ];
            match given
                .iter()
                .find(|(key, set)| *set && !allowed.contains(key))
            {
                Some((key, _)) => Err(err(format!("{key} does not apply to method {method:?}"))),
                None => Ok(()),
            }
        };
        let method = match method {
            "ngram" => {
                only(&["prompt_lookup_min", "prompt_lookup_max"])?;
                // vLLM: either bound alone sets both.
                let max = raw.prompt_lookup_max.or(raw.prompt_lookup_min).unwrap_or(4);
                let min = raw.prompt_lookup_min.unwrap_or(max.min(2));
                if min == 0 || min > max {
                    return Err(err(format!(
                        "need 1 <= prompt_lookup_min <= prompt_lookup_max, got {min} and {max}"
                    )));
                }
                SpeculativeMethod::Ngram {
                    prompt_lookup_min: min,
                    prompt_lookup_max: max,
                }
            }
            "suffix" => {
                only(&[
                    "suffix_decoding_max_tree_depth",
                    "suffix_decoding_max_cached_requests",
                    "suffix_decoding_max_spec_factor",
                    "suffix_decoding_min_token_prob",
                ])?;
                let s = SuffixSettings {
                    max_tree_depth: raw.suffix_decoding_max_tree_depth.unwrap_or(24),
                    max_cached_requests: raw.suffix_decoding_max_cached_requests.unwrap_or(10_000),
                    max_spec_factor: raw.suffix_decoding_max_spec_factor.unwrap_or(1.0),
                    min_token_prob: raw.suffix_decoding_min_token_prob.unwrap_or(0.1),
                };
                if s.max_tree_depth == 0 {
                    return Err(err(
                        "suffix_decoding_max_tree_depth must be at least 1".into()
                    ));
                }
                if !(s.max_spec_factor.is_finite() && s.max_spec_factor > 0.0) {
                    return Err(err("suffix_decoding_max_spec_factor must be > 0".into()));
                }
                if !(0.0..=1.0).contains(&s.min_token_prob) {
                    return Err(err(
                        "suffix_decoding_min_token_prob must be in [0, 1]".into()
                    ));
                }
                SpeculativeMethod::Suffix(s)
            }
            "draft_model" => {
                only(&["model", "hf_overrides"])?;
                let model = raw.model.ok_or_else(|| {
                    err("method draft_model needs \"model\": a checkpoint path".into())
                })?;
                let hf_overrides = match raw.hf_overrides {
                    Some(v) => Some(
                        v.to_string()
                            .parse::<HfOverrides>()
                            .map_err(|e| err(format!("hf_overrides: {e}")))?,
                    ),
                    None => None,
                };
                SpeculativeMethod::DraftModel {
                    model,
                    hf_overrides,
                }
            }
            "" => {
                return Err(err(
                    "method is required: ngram, suffix or draft_model".into()
                ))
            }
            other => {
                return Err(err(format!(
                    "unknown method {other:?}; supported: ngram, suffix, draft_model"
                )))
            }
        };
        Ok(Self {
            method,
            num_speculative_tokens: k,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_takes_vllm_spelling_and_defaults() {
        let c = SpeculativeConfig::from_json(
            r#"{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":3}"#,
        )
        .unwrap();
        assert_eq!(c.num_speculative_tokens, 4);
        assert_eq!(
            c.method,
            SpeculativeMethod::Ngram {
                prompt_lookup_min: 2,
                prompt_lookup_max: 3
            }
        );
    }

    #[test]
    fn bad_configs_name_what_is_wrong() {
        for (json, needle) in [
            (r#"{"method":"ngram"}"#, "num_speculative_tokens"),
            (
                r#"{"method":"eagle","num_speculative_tokens":2}"#,
                "unknown method",
            ),
            (r#"{"method":"ngram","num_speculative_tokens":0}"#, "1..="),
            (
                r#"{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":5,"prompt_lookup_max":3}"#,
                "prompt_lookup_min",
            ),
            (
                r#"{"method":"ngram","num_speculative_tokens":2,"model":"x"}"#,
                "does not apply",
            ),
            (
                r#"{"method":"draft_model","num_speculative_tokens":2}"#,
                "needs",
            ),
            (
                r#"{"method":"ngram","num_speculative_tokens":2,"typo":1}"#,
                "typo",
            ),
            ("not json", "not valid"),
        ] {
            let e = SpeculativeConfig::from_json(json).unwrap_err();
            assert!(e.to_string().contains(needle), "{json}: {e}");
            assert_eq!(e.flag(), "--speculative-config");
        }
    }

    #[test]
    fn a_model_alone_means_draft_model() {
        let c = SpeculativeConfig::from_json(
            r#"{"model":"d.gguf","num_speculative_tokens":3,"hf_overrides":{"num_hidden_layers":2}}"#,
        )
        .unwrap();
        assert!(matches!(c.method, SpeculativeMethod::DraftModel { .. }));
    }
}
