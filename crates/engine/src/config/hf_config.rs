//! `HfConfig`: the fields of a Hugging Face `config.json` we read, and their translation
//! into a `ModelConfig` (RoPE scaling, Gemma 3's layer kinds, Qwen3-MoE's experts).

use super::local_attention::{LayerKind, LocalAttention};
use super::model_config::{llama3_freq_divisors, Architecture, ModelConfig, MoeConfig, RopeStyle};
use super::sliding_window::SlidingWindow;
use serde::Deserialize;

/// The fields of a Hugging Face `config.json` that we read.
#[derive(Debug, Deserialize)]
pub(crate) struct HfConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub rms_norm_eps: f64,
    pub rope_theta: Option<f64>,
    /// Classic key; `null` or absent means plain RoPE.
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// transformers 5's key: the theta and the scaling together, or (Gemma 3) one such
    /// entry per layer kind.
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<OneOrMany>,
    /// Qwen3-MoE's keys. transformers 5 names the first `num_local_experts`, and configs
    /// may hold both (an alias would refuse that as a duplicate).
    pub num_experts: Option<usize>,
    pub num_local_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub moe_intermediate_size: Option<usize>,
    pub norm_topk_prob: Option<bool>,
    pub decoder_sparse_step: Option<usize>,
    #[serde(default)]
    pub mlp_only_layers: Vec<usize>,
    /// Gemma 3's keys: the window, which layers slide (`layer_types`, else every
    /// `sliding_window_pattern`-th layer is global), the sliding layers' RoPE base, the
    /// score scale, and the softcaps it must not have.
    pub sliding_window: Option<usize>,
    pub layer_types: Option<Vec<String>>,
    pub sliding_window_pattern: Option<usize>,
    #[serde(rename = "_sliding_window_pattern")]
    pub sliding_window_pattern_private: Option<usize>,
    pub rope_local_base_freq: Option<f64>,
    pub query_pre_attn_scalar: Option<f64>,
    pub attn_logit_softcapping: Option<f64>,
    pub final_logit_softcapping: Option<f64>,
    pub hidden_activation: Option<String>,
}

/// transformers 5's `rope_parameters`: one entry, or Gemma 3's entry per layer kind.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RopeParameters {
    PerLayerKind {
        full_attention: RopeScaling,
        sliding_attention: Option<RopeScaling>,
    },
    Single(RopeScaling),
}

impl RopeParameters {
    /// The entry global layers use.
    fn global(&self) -> &RopeScaling {
        match self {
            Self::PerLayerKind { full_attention, .. } => full_attention,
            Self::Single(one) => one,
        }
    }
}

/// HF `rope_scaling` / `rope_parameters`. Older configs name the type `type`.
#[derive(Debug, Deserialize)]
pub(crate) struct RopeScaling {
    #[serde(alias = "type")]
    pub rope_type: Option<String>,
    pub rope_theta: Option<f64>,
    pub factor: Option<f64>,
    pub low_freq_factor: Option<f64>,
    pub high_freq_factor: Option<f64>,
    pub original_max_position_embeddings: Option<usize>,
}

impl RopeScaling {
    /// The divisor of each of `head_dim / 2` frequencies, or `None` for plain RoPE. A type
    /// we do not implement is refused: ignoring it would rotate by the wrong angles from the
    /// first token on, with no other sign.
    fn freq_divisors(&self, theta: f64, head_dim: usize) -> Result<Option<Vec<f64>>, String> {
        let kind = self.rope_type.as_deref().unwrap_or("default");
        let need = |v: Option<f64>, key: &str| {
            v.ok_or_else(|| format!("rope_scaling type {kind:?} needs {key}"))
        };
        match kind {
            "default" => Ok(None),
            "linear" => Ok(Some(vec![need(self.factor, "factor")?; head_dim / 2])),
            "llama3" => {
                let original = self
                    .original_max_position_embeddings
                    .ok_or("rope_scaling type \"llama3\" needs original_max_position_embeddings")?;
                Ok(Some(llama3_freq_divisors(
                    theta,
                    head_dim,
                    need(self.factor, "factor")?,
                    need(self.low_freq_factor, "low_freq_factor")?,
                    need(self.high_freq_factor, "high_freq_factor")?,
                    original as f64,
                )))
            }
            other => Err(format!(
                "unsupported rope_scaling type {other:?} (supported: default, linear, llama3)"
            )),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

const DEFAULT_ROPE_THETA: f64 = 10_000.0;

fn default_max_positions() -> usize {
    4096
}

impl HfConfig {
    pub fn into_model_config(self) -> Result<ModelConfig, String> {
        let name = self
            .architectures
            .first()
            .cloned()
            .or(self.model_type.clone())
            .unwrap_or_default();
        let architecture = Architecture::parse(&name)?;
        let head_dim = self
            .head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1));
        let rope_theta = self
            .rope_theta
            .or(self
                .rope_parameters
                .as_ref()
                .and_then(|p| p.global().rope_theta))
            .unwrap_or(DEFAULT_ROPE_THETA);
        // The classic key wins; transformers 5 writes both, and the same scaling in each.
        let rope_freq_divisors = match self
            .rope_scaling
            .as_ref()
            .or(self.rope_parameters.as_ref().map(RopeParameters::global))
        {
            Some(scaling) => scaling.freq_divisors(rope_theta, head_dim)?,
            None => None,
        };
        let moe = match architecture {
            Architecture::Qwen3Moe => Some(self.moe_config()?),
            _ => None,
        };
        let (local_attention, query_pre_attn_scalar) = match architecture {
            Architecture::Gemma3 => self.gemma3_attention()?,
            _ => (None, None),
        };
        let eos_token_ids = match self.eos_token_id {
            Some(OneOrMany::One(id)) => vec![id],
            Some(OneOrMany::Many(ids)) => ids,
            None => Vec::new(),
        };
        Ok(ModelConfig {
            architecture,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta,
            rope_style: RopeStyle::HalfSplit,
            rope_freq_divisors,
            max_position_embeddings: self.max_position_embeddings,
            tie_word_embeddings: self.tie_word_embeddings,
            bos_token_id: self.bos_token_id,
            eos_token_ids,
            moe,
            local_attention,
            query_pre_attn_scalar,
        })
    }

    /// Gemma 3's sliding layers and score scale, with transformers' defaults
    /// (`Gemma3TextConfig`: window 4096, every 6th layer global, local base 10,000,
    /// `query_pre_attn_scalar` 256). A softcap or an activation we do not run is refused.
    fn gemma3_attention(&self) -> Result<(Option<LocalAttention>, Option<f64>), String> {
        for (key, cap) in [
            ("attn_logit_softcapping", self.attn_logit_softcapping),
            ("final_logit_softcapping", self.final_logit_softcapping),
        ] {
            if let Some(cap) = cap {
                return Err(format!(
                    "{key} {cap}: logit softcapping is not supported (Gemma 3 has none)"
                ));
            }
        }
        match self.hidden_activation.as_deref() {
            None | Some("gelu_pytorch_tanh") | Some("gelu_tanh") => {}
            Some(other) => {
                return Err(format!(
                    "hidden_activation {other:?} is not supported for gemma3 (supported: \
                     gelu_pytorch_tanh)"
                ))
            }
        }
        let positions = self.sliding_window.unwrap_or(4096);
        let window = SlidingWindow::new(positions)
            .ok_or("sliding_window 0: a sliding layer must see at least its own position")?;
        let layers = match &self.layer_types {
            Some(types) => types
                .iter()
                .map(|t| match t.as_str() {
                    "sliding_attention" => Ok(LayerKind::Sliding),
                    "full_attention" => Ok(LayerKind::Global),
                    other => Err(format!(
                        "layer_types holds {other:?} (supported: sliding_attention, \
                         full_attention)"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => LocalAttention::every_nth_global(
                self.sliding_window_pattern
                    .or(self.sliding_window_pattern_private)
                    .unwrap_or(6),
                self.num_hidden_layers,
            ),
        };
        if layers.len() != self.num_hidden_layers {
            return Err(format!(
                "layer_types lists {} layers but num_hidden_layers is {}",
                layers.len(),
                self.num_hidden_layers
            ));
        }
        let local_theta = match &self.rope_parameters {
            Some(RopeParameters::PerLayerKind {
                sliding_attention: Some(local),
                ..
            }) => local.rope_theta,
            _ => None,
        };
        let local = LocalAttention {
            window,
            layers,
            rope_theta: self
                .rope_local_base_freq
                .or(local_theta)
                .unwrap_or(DEFAULT_ROPE_THETA),
        };
        let scalar = self.query_pre_attn_scalar.unwrap_or(256.0);
        if !(scalar > 0.0 && scalar.is_finite()) {
            return Err(format!(
                "query_pre_attn_scalar {scalar}: the score scale is its inverse square root, \
                 so it must be positive"
            ));
        }
        Ok((Some(local), Some(scalar)))
    }

    /// The experts' shape, with transformers' defaults where Qwen3-MoE has one; the counts
    /// have none, so a config without them is refused rather than guessed.
    fn moe_config(&self) -> Result<MoeConfig, String> {
        let need = |v: Option<usize>, key: &str| {
            v.ok_or_else(|| format!("a qwen3_moe config needs {key}"))
        };
        let moe = MoeConfig {
            num_experts: need(self.num_experts.or(self.num_local_experts), "num_experts")?,
            experts_per_token: need(self.num_experts_per_tok, "num_experts_per_tok")?,
            expert_intermediate_size: need(self.moe_intermediate_size, "moe_intermediate_size")?,
            norm_topk_prob: self.norm_topk_prob.unwrap_or(false),
            decoder_sparse_step: self.decoder_sparse_step.unwrap_or(1),
            mlp_only_layers: self.mlp_only_layers.clone(),
        };
        moe.validate()?;
        Ok(moe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_json(json: &str) -> Result<ModelConfig, String> {
        serde_json::from_str::<HfConfig>(json)
            .map_err(|e| e.to_string())?
            .into_model_config()
    }

    fn parse(rope: &str) -> Result<ModelConfig, String> {
        let json = format!(
            r#"{{"architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
                "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, {rope}}}"#
        );
        from_json(&json)
    }

    #[test]
    fn llama3_rope_scaling_keeps_divides_and_blends_the_three_bands() {
        let c = parse(
            r#""rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}"#,
        )
        .unwrap();
        let d = c.rope_freq_divisors.unwrap();
        assert_eq!(d.len(), 8);
        assert_eq!(d[0], 1.0, "the fastest frequency is kept");
        assert_eq!(d[7], 8.0, "the slowest is divided by the factor");
        assert!(
            d.iter().any(|&x| x > 1.0 && x < 8.0),
            "some are blended: {d:?}"
        );
        assert!(d.windows(2).all(|w| w[0] <= w[1]), "{d:?}");
    }

    #[test]
    fn an_unknown_rope_scaling_type_is_refused_not_ignored() {
        for kind in ["yarn", "dynamic", "longrope"] {
            let err = parse(&format!(
                r#""rope_scaling": {{"type": "{kind}", "factor": 4.0}}"#
            ))
            .unwrap_err();
            assert!(
                err.contains("unsupported rope_scaling type"),
                "{kind}: {err}"
            );
        }
        let plain = parse(r#""rope_scaling": null"#).unwrap();
        assert!(plain.rope_freq_divisors.is_none());
    }

    #[test]
    fn qwen2_moe_is_named_when_refused() {
        let err = Architecture::parse("Qwen2MoeForCausalLM").unwrap_err();
        assert!(err.contains("unsupported architecture qwen2moe"), "{err}");
    }

    fn parse_moe(extra: &str) -> Result<ModelConfig, String> {
        let json = format!(
            r#"{{"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 512, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                "head_dim": 16, "rms_norm_eps": 1e-6, "num_local_experts": 8,
                "moe_intermediate_size": 32 {extra}}}"#
        );
        from_json(&json)
    }

    #[test]
    fn qwen3_moe_sparse_layers_follow_the_sparse_step_and_the_mlp_only_list() {
        let c = parse_moe(
            r#", "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3],
                "norm_topk_prob": true"#,
        )
        .unwrap();
        let moe = c.moe.as_ref().unwrap();
        assert_eq!((moe.num_experts, moe.experts_per_token), (8, 2));
        assert!(moe.norm_topk_prob);
        let sparse: Vec<bool> = (0..4).map(|l| c.is_sparse_layer(l)).collect();
        assert_eq!(sparse, [false, true, false, false]);
    }

    #[test]
    fn a_qwen3_moe_config_without_top_k_or_with_too_many_is_refused() {
        let err = parse_moe("").unwrap_err();
        assert!(err.contains("num_experts_per_tok"), "{err}");
        let err = parse_moe(r#", "num_experts_per_tok": 9"#).unwrap_err();
        assert!(err.contains("9 experts per token out of 8"), "{err}");
    }

    fn parse_gemma3(extra: &str) -> Result<ModelConfig, String> {
        let json = format!(
            r#"{{"architectures": ["Gemma3ForCausalLM"], "vocab_size": 512, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 7, "num_attention_heads": 4,
                "head_dim": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0 {extra}}}"#
        );
        from_json(&json)
    }

    #[test]
    fn gemma3_layer_types_name_the_sliding_layers_and_the_pattern_stands_in_for_them() {
        let kinds =
            |c: &ModelConfig| -> Vec<bool> { (0..7).map(|l| c.window_of(l).is_some()).collect() };
        let listed = parse_gemma3(
            r#", "sliding_window": 8, "query_pre_attn_scalar": 64, "rope_local_base_freq": 10000.0,
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(kinds(&listed), [false, true, true, true, true, true, false]);
        assert_eq!(listed.window_of(1).unwrap().get(), 8);
        assert_eq!(listed.query_pre_attn_scalar, Some(64.0));
        assert_eq!(
            listed.local_attention.as_ref().unwrap().rope_theta,
            10_000.0
        );
        assert_eq!(listed.rope_theta, 1e6);
        let by_pattern =
            parse_gemma3(r#", "sliding_window": 8, "sliding_window_pattern": 3"#).unwrap();
        assert_eq!(
            kinds(&by_pattern),
            [true, true, false, true, true, false, true]
        );
    }

    #[test]
    fn gemma3_refuses_softcapping_and_a_layer_list_of_the_wrong_length() {
        let err = parse_gemma3(r#", "final_logit_softcapping": 30.0"#).unwrap_err();
        assert!(err.contains("final_logit_softcapping 30"), "{err}");
        let err = parse_gemma3(r#", "layer_types": ["full_attention"]"#).unwrap_err();
        assert!(
            err.contains("lists 1 layers but num_hidden_layers is 7"),
            "{err}"
        );
        let err =
            parse_gemma3(r#", "layer_types": ["chunked_attention", "a", "b", "c", "d", "e", "f"]"#)
                .unwrap_err();
        assert!(err.contains("\"chunked_attention\""), "{err}");
    }

    #[test]
    fn gemma3_per_kind_rope_parameters_give_the_global_theta_and_scaling_and_the_local_base() {
        let c = parse_gemma3(
            r#", "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0,
                "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default",
                "rope_theta": 10000.0}}"#,
        )
        .unwrap();
        assert_eq!(c.rope_freq_divisors.as_deref(), Some(&[8.0; 16][..]));
        assert_eq!(c.local_attention.as_ref().unwrap().rope_theta, 10_000.0);
    }
}
