//! The shape of a decoder-only model, read from a checkpoint's metadata.

use serde::Deserialize;

/// The model families whose forward pass we implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, SmolLM2, Mistral-shaped models.
    Llama,
    /// Qwen3 dense: Llama plus an RMSNorm on every query and key head.
    Qwen3,
}

impl Architecture {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "llama" | "LlamaForCausalLM" | "MistralForCausalLM" | "mistral" => Some(Self::Llama),
            "qwen3" | "Qwen3ForCausalLM" => Some(Self::Qwen3),
            _ => None,
        }
    }
}

/// How query/key pairs are rotated. GGUF's llama converter permutes Q/K rows so that
/// adjacent elements form a pair; Hugging Face checkpoints (and GGUF qwen3) pair element
/// `i` with `i + head_dim / 2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    AdjacentPairs,
    HalfSplit,
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_style: RopeStyle,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

impl ModelConfig {
    pub fn has_qk_norm(&self) -> bool {
        self.architecture == Architecture::Qwen3
    }

    /// Bytes of keys plus values one token occupies in the f32 KV cache, over all layers.
    /// Keys and values of every layer for one token, at `element_size` bytes per number.
    pub fn kv_bytes_per_token(&self, element_size: usize) -> usize {
        2 * self.num_layers * self.num_kv_heads * self.head_dim * element_size
    }

    /// Qwen3-0.6B's published shape, for random-weight benchmarking.
    pub fn qwen3_0_6b() -> Self {
        Self {
            architecture: Architecture::Qwen3,
            vocab_size: 151_936,
            hidden_size: 1024,
            intermediate_size: 3072,
            num_layers: 28,
            num_heads: 16,
            num_kv_heads: 8,
            head_dim: 128,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_style: RopeStyle::HalfSplit,
            max_position_embeddings: 40_960,
            tie_word_embeddings: true,
            bos_token_id: None,
            eos_token_ids: vec![151_645],
        }
    }

    /// SmolLM2-135M's shape, for random-weight runs of the default model's size.
    pub fn smollm2_135m() -> Self {
        Self {
            architecture: Architecture::Llama,
            vocab_size: 49_152,
            hidden_size: 576,
            intermediate_size: 1536,
            num_layers: 30,
            num_heads: 9,
            num_kv_heads: 3,
            head_dim: 64,
            rms_norm_eps: 1e-5,
            rope_theta: 100_000.0,
            rope_style: RopeStyle::HalfSplit,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
        }
    }
}

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
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<OneOrMany>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

fn default_rope_theta() -> f64 {
    10_000.0
}

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
        let architecture = Architecture::from_name(&name)
            .ok_or_else(|| format!("unknown architecture {name:?} (supported: llama, qwen3)"))?;
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
            head_dim: self
                .head_dim
                .unwrap_or(self.hidden_size / self.num_attention_heads),
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            rope_style: RopeStyle::HalfSplit,
            max_position_embeddings: self.max_position_embeddings,
            tie_word_embeddings: self.tie_word_embeddings,
            bos_token_id: self.bos_token_id,
            eos_token_ids,
        })
    }
}
