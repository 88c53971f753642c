//! Published model shapes as `ModelConfig`s, for random-weight benchmarking and tests
//! (`--load-format dummy --model NAME`).

use super::local_attention::LocalAttention;
use super::model_config::{llama3_freq_divisors, Architecture, ModelConfig, MoeConfig, RopeStyle};
use super::sliding_window::SlidingWindow;

impl ModelConfig {
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
            rope_freq_divisors: None,
            max_position_embeddings: 40_960,
            tie_word_embeddings: true,
            bos_token_id: None,
            eos_token_ids: vec![151_645],
            moe: None,
            local_attention: None,
            query_pre_attn_scalar: None,
        }
    }

    /// Qwen3-30B-A3B's published shape (128 experts, 8 per token, every layer sparse), for
    /// random-weight runs; `--hf-overrides '{"num_hidden_layers": 8}'` shrinks it to fit.
    pub fn qwen3_30b_a3b() -> Self {
        Self {
            architecture: Architecture::Qwen3Moe,
            vocab_size: 151_936,
            hidden_size: 2048,
            intermediate_size: 6144,
            num_layers: 48,
            num_heads: 32,
            num_kv_heads: 4,
            head_dim: 128,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_style: RopeStyle::HalfSplit,
            rope_freq_divisors: None,
            max_position_embeddings: 40_960,
            tie_word_embeddings: false,
            bos_token_id: None,
            eos_token_ids: vec![151_645],
            moe: Some(MoeConfig {
                num_experts: 128,
                experts_per_token: 8,
                expert_intermediate_size: 768,
                norm_topk_prob: true,
                decoder_sparse_step: 1,
                mlp_only_layers: Vec::new(),
            }),
            local_attention: None,
            query_pre_attn_scalar: None,
        }
    }

    /// Qwen2.5-0.5B's published shape (q/k/v biases, 2 KV heads), for random-weight runs.
    pub fn qwen2_5_0_5b() -> Self {
        Self {
            architecture: Architecture::Qwen2,
            vocab_size: 151_936,
            hidden_size: 896,
            intermediate_size: 4864,
            num_layers: 24,
            num_heads: 14,
            num_kv_heads: 2,
            head_dim: 64,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_style: RopeStyle::HalfSplit,
            rope_freq_divisors: None,
            max_position_embeddings: 32_768,
            tie_word_embeddings: true,
            bos_token_id: None,
            eos_token_ids: vec![151_645],
            moe: None,
            local_attention: None,
            query_pre_attn_scalar: None,
        }
    }

    /// Llama-3.2-1B's published shape, with its Llama 3 RoPE scaling (factor 32 over an
    /// original 8,192 positions), for random-weight runs.
    pub fn llama_3_2_1b() -> Self {
        let (theta, head_dim) = (500_000.0, 64);
        Self {
            architecture: Architecture::Llama,
            vocab_size: 128_256,
            hidden_size: 2048,
            intermediate_size: 8192,
            num_layers: 16,
            num_heads: 32,
            num_kv_heads: 8,
            head_dim,
            rms_norm_eps: 1e-5,
            rope_theta: theta,
            rope_style: RopeStyle::HalfSplit,
            rope_freq_divisors: Some(llama3_freq_divisors(
                theta, head_dim, 32.0, 1.0, 4.0, 8192.0,
            )),
            max_position_embeddings: 131_072,
            tie_word_embeddings: true,
            bos_token_id: Some(128_000),
            eos_token_ids: vec![128_001, 128_008, 128_009],
            moe: None,
            local_attention: None,
            query_pre_attn_scalar: None,
        }
    }

    /// google/gemma-3-270m's published shape (15 sliding layers of a 512-position window,
    /// every sixth global; a 262,144-token vocabulary), for random-weight runs.
    pub fn gemma3_270m() -> Self {
        let num_layers = 18;
        Self {
            architecture: Architecture::Gemma3,
            vocab_size: 262_144,
            hidden_size: 640,
            intermediate_size: 2048,
            num_layers,
            num_heads: 4,
            num_kv_heads: 1,
            head_dim: 256,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_style: RopeStyle::HalfSplit,
            rope_freq_divisors: None,
            max_position_embeddings: 32_768,
            tie_word_embeddings: true,
            bos_token_id: Some(2),
            eos_token_ids: vec![1, 106],
            moe: None,
            local_attention: Some(LocalAttention {
                window: SlidingWindow::new(512).expect("a window of 512"),
                layers: LocalAttention::every_nth_global(6, num_layers),
                rope_theta: 10_000.0,
            }),
            query_pre_attn_scalar: Some(256.0),
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
            rope_freq_divisors: None,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
            moe: None,
            local_attention: None,
            query_pre_attn_scalar: None,
        }
    }
}
