//! `ModelConfig`: the shape of a decoder-only model, read from a checkpoint's metadata
//! (`hf_config.rs` reads HF `config.json`; `model_presets.rs` holds published shapes).

use super::kv_cache_dtype::KvCacheDtype;
use super::kv_cache_groups::KvCacheGroups;
use super::local_attention::LocalAttention;
use super::sliding_window::SlidingWindow;

/// The model families whose forward pass we implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, SmolLM2, Mistral-shaped models.
    Llama,
    /// Qwen2 / Qwen2.5: Llama plus biases on the query, key and value projections.
    Qwen2,
    /// Qwen3 dense: Llama plus an RMSNorm on every query and key head.
    Qwen3,
    /// Qwen3-MoE: Qwen3's attention, and a mixture of experts in place of the MLP on its
    /// sparse layers (see [`MoeConfig`]).
    Qwen3Moe,
    /// Gemma 3 (text): embeddings scaled by √hidden, Gemma's RMSNorm `x·(1 + w)` before and
    /// after both attention and the MLP, per-head q/k norms, GeGLU with tanh-approximated
    /// GELU, and sliding-window attention on most layers ([`LocalAttention`]).
    Gemma3,
}

impl Architecture {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "llama" | "LlamaForCausalLM" | "MistralForCausalLM" | "mistral" => Some(Self::Llama),
            "qwen2" | "Qwen2ForCausalLM" => Some(Self::Qwen2),
            "qwen3" | "Qwen3ForCausalLM" => Some(Self::Qwen3),
            "qwen3moe" | "qwen3_moe" | "Qwen3MoeForCausalLM" => Some(Self::Qwen3Moe),
            "gemma3" | "gemma3_text" | "Gemma3ForCausalLM" => Some(Self::Gemma3),
            _ => None,
        }
    }

    /// `name` (a GGUF `general.architecture` or an HF class or model type) as an
    /// [`Architecture`], or the error that refuses it. Known families we do not run are
    /// named by their GGUF name, so a GGUF and a safetensors copy fail alike.
    pub fn parse(name: &str) -> Result<Self, String> {
        const SUPPORTED: &str = "supported: llama, qwen2, qwen3, qwen3moe, gemma3";
        Self::from_name(name).ok_or_else(|| match name {
            "qwen2moe" | "qwen2_moe" | "Qwen2MoeForCausalLM" => {
                format!("unsupported architecture qwen2moe (from {name:?}; {SUPPORTED})")
            }
            "Gemma3ForConditionalGeneration" | "gemma3_vlm" => format!(
                "unsupported architecture {name:?}: Gemma 3's vision model (its text-only \
                 Gemma3ForCausalLM is {SUPPORTED})"
            ),
            "gemma" | "gemma2" | "GemmaForCausalLM" | "Gemma2ForCausalLM" => {
                format!("unsupported architecture {name:?} ({SUPPORTED})")
            }
            other => format!("unknown architecture {other:?} ({SUPPORTED})"),
        })
    }
}

/// How query/key pairs are rotated. GGUF's llama converter permutes Q/K rows so that
/// adjacent elements form a pair; Hugging Face checkpoints (and GGUF qwen2/qwen3) pair element
/// `i` with `i + head_dim / 2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    AdjacentPairs,
    HalfSplit,
}

/// The mixture of experts of a sparse model (Qwen3-MoE): which layers route, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    pub num_experts: usize,
    /// Experts each token is sent to (`top_k`).
    pub experts_per_token: usize,
    /// Rows of each expert's gate/up projection.
    pub expert_intermediate_size: usize,
    /// Whether a token's `top_k` routing weights are renormalised to sum to 1.
    pub norm_topk_prob: bool,
    /// Every `decoder_sparse_step`-th layer (counting from 1) is sparse...
    pub decoder_sparse_step: usize,
    /// ...unless listed here: those keep a dense MLP.
    pub mlp_only_layers: Vec<usize>,
}

impl MoeConfig {
    /// Whether layer `layer` (from 0) routes through experts, as transformers decides it.
    pub fn is_sparse_layer(&self, layer: usize) -> bool {
        self.num_experts > 0
            && self.decoder_sparse_step > 0
            && (layer + 1).is_multiple_of(self.decoder_sparse_step)
            && !self.mlp_only_layers.contains(&layer)
    }

    /// A shape the router can run, or why not: a bad checkpoint is refused at load.
    pub fn validate(&self) -> Result<(), String> {
        if self.experts_per_token == 0 || self.experts_per_token > self.num_experts {
            return Err(format!(
                "{} experts per token out of {} experts: need 1 ≤ top_k ≤ experts",
                self.experts_per_token, self.num_experts
            ));
        }
        if self.expert_intermediate_size == 0 {
            return Err("an expert intermediate size of 0".into());
        }
        if self.decoder_sparse_step == 0 {
            return Err("decoder_sparse_step 0 (it must be at least 1)".into());
        }
        Ok(())
    }
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
    /// What each rotary frequency `θ^(-2i/d)` is divided by (`head_dim / 2` of them): Llama 3
    /// scaling (HF `rope_scaling`, GGUF `rope_freqs.weight`) or linear scaling. `None`: plain
    /// RoPE.
    pub rope_freq_divisors: Option<Vec<f64>>,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// The experts of a sparse model; `None` for dense ones.
    pub moe: Option<MoeConfig>,
    /// Sliding-window layers (Gemma 3); `None` where every layer attends globally.
    pub local_attention: Option<LocalAttention>,
    /// Scores are scaled by `query_pre_attn_scalar^-0.5` (HF Gemma 3) instead of
    /// `head_dim^-0.5`; `None`: by `head_dim^-0.5` (every GGUF: llama.cpp's converter folds
    /// the difference into the q-norm weights).
    pub query_pre_attn_scalar: Option<f64>,
}

impl ModelConfig {
    /// The KV heads each token stores in the cache.
    pub fn kv_heads(&self) -> KvHeads {
        KvHeads {
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
        }
    }

    pub fn has_qk_norm(&self) -> bool {
        matches!(
            self.architecture,
            Architecture::Qwen3 | Architecture::Qwen3Moe | Architecture::Gemma3
        )
    }

    /// Layer `layer`'s sliding window; `None` where it attends to every earlier position.
    pub fn window_of(&self, layer: usize) -> Option<SlidingWindow> {
        self.local_attention
            .as_ref()
            .and_then(|l| l.window_of(layer))
    }

    /// How the layers share KV pages: grouped by their window (see [`KvCacheGroups`]).
    pub fn kv_cache_groups(&self) -> KvCacheGroups {
        let windows: Vec<_> = (0..self.num_layers).map(|l| self.window_of(l)).collect();
        KvCacheGroups::new(&windows)
    }

    /// Whether layer `layer` routes through experts rather than a dense MLP.
    pub fn is_sparse_layer(&self, layer: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| m.is_sparse_layer(layer))
    }

    /// Qwen2 always has q/k/v biases; other families only when the checkpoint holds them.
    pub fn requires_qkv_bias(&self) -> bool {
        self.architecture == Architecture::Qwen2
    }

    /// Bytes of keys plus values one token occupies in a KV cache of `dtype`, over all
    /// layers. Saturates, so an absurd shape reads as a pool that fits in no memory.
    pub fn kv_bytes_per_token(&self, dtype: KvCacheDtype) -> usize {
        let values = [self.num_layers, self.num_kv_heads, self.head_dim]
            .into_iter()
            .fold(1usize, usize::saturating_mul);
        dtype.bytes_for(values, self.head_dim).saturating_mul(2)
    }

    /// Refuses a shape no model has — a zero width or count, an odd head (RoPE rotates
    /// pairs), query heads not shared evenly by the key/value heads — or whose widths
    /// overflow, before anything is sized by it.
    pub fn check_dimensions(&self) -> Result<(), String> {
        for (name, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_layers", self.num_layers),
            ("num_heads", self.num_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
        ] {
            if value == 0 {
                return Err(format!("{name} is 0"));
            }
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!(
                "head_dim {} is odd; rotary embeddings rotate pairs",
                self.head_dim
            ));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(format!(
                "{} query heads cannot share {} key/value heads evenly",
                self.num_heads, self.num_kv_heads
            ));
        }
        let widths = [self.num_heads, self.num_kv_heads]
            .map(|heads| heads.checked_mul(self.head_dim))
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .and_then(|w| w[0].checked_add(w[1].checked_mul(2)?));
        if widths.is_none() {
            return Err(format!(
                "{} heads of {} overflow the address space",
                self.num_heads, self.head_dim
            ));
        }
        Ok(())
    }
}

/// Llama 3's frequency divisors, as transformers' `_compute_llama3_parameters` and
/// llama.cpp's converter compute them: wavelengths shorter than `original / high` keep
/// their frequency, those longer than `original / low` are divided by `factor`, and those
/// between blend the two smoothly.
pub fn llama3_freq_divisors(
    theta: f64,
    head_dim: usize,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original_max_positions: f64,
) -> Vec<f64> {
    let low_freq_wavelen = original_max_positions / low_freq_factor;
    let high_freq_wavelen = original_max_positions / high_freq_factor;
    (0..head_dim / 2)
        .map(|i| {
            let freq = theta.powf(-2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (original_max_positions / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// The KV heads each token stores: `num_kv_heads` of `head_dim` values, keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvHeads {
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

impl KvHeads {
    /// Elements of one token's key (or value): `num_kv_heads · head_dim`.
    pub fn width(self) -> usize {
        self.num_kv_heads * self.head_dim
    }
}
