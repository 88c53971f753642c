//! Random weights of a real architecture's shape (like vLLM's `--load-format dummy`):
//! the same speed as the real model, no download.

use super::Checkpoint;
use crate::config::model_config::{Architecture, ModelConfig};
use crate::error::{EngineError, Result};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DummyDType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    /// K-quants, for matrices whose rows are whole super-blocks of 256; narrower ones are
    /// Q8_0, as llama.cpp falls back to a legacy format there (e.g. SmolLM2's width 576).
    Q4K,
    Q5K,
    Q6K,
    /// Values rounded to BF16, computed in f32 (candle has no fast BF16 CPU matmul).
    BF16,
    F32,
}

impl std::str::FromStr for DummyDType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "q4_0" => Ok(Self::Q4_0),
            "q4_1" => Ok(Self::Q4_1),
            "q5_0" => Ok(Self::Q5_0),
            "q5_1" => Ok(Self::Q5_1),
            "q8_0" => Ok(Self::Q8_0),
            "q4_k" => Ok(Self::Q4K),
            "q5_k" => Ok(Self::Q5K),
            "q6_k" => Ok(Self::Q6K),
            "bf16" => Ok(Self::BF16),
            "f32" => Ok(Self::F32),
            other => Err(format!(
                "unknown dummy dtype {other:?} (q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, \
                 bf16, f32)"
            )),
        }
    }
}

pub struct DummyCheckpoint {
    origin: PathBuf,
    config: ModelConfig,
    dtype: DummyDType,
    seed: u64,
}

impl DummyCheckpoint {
    /// `shape` names a published architecture: `qwen3-0.6b`, `qwen3-30b-a3b`, `qwen2.5-0.5b`,
    /// `llama-3.2-1b`, `smollm2-135m` or `gemma3-270m`.
    pub fn new(shape: &str, dtype: DummyDType, seed: u64) -> Result<Self> {
        let config = match shape.to_ascii_lowercase().as_str() {
            "qwen3-0.6b" => ModelConfig::qwen3_0_6b(),
            "qwen3-30b-a3b" => ModelConfig::qwen3_30b_a3b(),
            "qwen2.5-0.5b" => ModelConfig::qwen2_5_0_5b(),
            "llama-3.2-1b" => ModelConfig::llama_3_2_1b(),
            "smollm2-135m" => ModelConfig::smollm2_135m(),
            "gemma3-270m" => ModelConfig::gemma3_270m(),
            other => {
                return Err(EngineError::Unsupported(format!(
                    "unknown dummy shape {other:?} (qwen3-0.6b, qwen3-30b-a3b, qwen2.5-0.5b, \
                     llama-3.2-1b, smollm2-135m, gemma3-270m)"
                )))
            }
        };
        Ok(Self::from_config(config, dtype, seed, shape))
    }

    pub fn from_config(config: ModelConfig, dtype: DummyDType, seed: u64, name: &str) -> Self {
        Self {
            origin: PathBuf::from(format!("dummy:{name}")),
            config,
            dtype,
            seed,
        }
    }

    fn shape_of(&self, name: &str) -> Option<Vec<usize>> {
        let c = &self.config;
        let (q, kv) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let shape = match name {
            "token_embd.weight" | "output.weight" => vec![c.vocab_size, c.hidden_size],
            "output_norm.weight" => vec![c.hidden_size],
            _ => {
                let (layer, leaf) = name.strip_prefix("blk.")?.split_once('.')?;
                let layer: usize = layer.parse().ok()?;
                if layer >= c.num_layers {
                    return None;
                }
                let sparse = c.moe.as_ref().filter(|m| m.is_sparse_layer(layer));
                // A sparse layer has a router and stacked experts in place of the MLP.
                match (leaf, sparse) {
                    ("ffn_gate_inp.weight", Some(m)) => {
                        return Some(vec![m.num_experts, c.hidden_size])
                    }
                    ("ffn_gate_exps.weight" | "ffn_up_exps.weight", Some(m)) => {
                        return Some(vec![
                            m.num_experts,
                            m.expert_intermediate_size,
                            c.hidden_size,
                        ])
                    }
                    ("ffn_down_exps.weight", Some(m)) => {
                        return Some(vec![
                            m.num_experts,
                            c.hidden_size,
                            m.expert_intermediate_size,
                        ])
                    }
                    ("ffn_gate.weight" | "ffn_up.weight" | "ffn_down.weight", Some(_)) => {
                        return None
                    }
                    _ => {}
                }
                match leaf {
                    "attn_norm.weight" | "ffn_norm.weight" => vec![c.hidden_size],
                    "post_attention_norm.weight" | "post_ffw_norm.weight"
                        if c.architecture == Architecture::Gemma3 =>
                    {
                        vec![c.hidden_size]
                    }
                    "attn_q_norm.weight" | "attn_k_norm.weight" if c.has_qk_norm() => {
                        vec![c.head_dim]
                    }
                    "attn_q.bias" if c.requires_qkv_bias() => vec![q],
                    "attn_k.bias" | "attn_v.bias" if c.requires_qkv_bias() => vec![kv],
                    "attn_q.weight" => vec![q, c.hidden_size],
                    "attn_k.weight" | "attn_v.weight" => vec![kv, c.hidden_size],
                    "attn_output.weight" => vec![c.hidden_size, q],
                    "ffn_gate.weight" | "ffn_up.weight" => vec![c.intermediate_size, c.hidden_size],
                    "ffn_down.weight" => vec![c.hidden_size, c.intermediate_size],
                    _ => return None,
                }
            }
        };
        Some(shape)
    }
}

impl Checkpoint for DummyCheckpoint {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn config_mut(&mut self) -> &mut ModelConfig {
        &mut self.config
    }

    fn origin(&self) -> &Path {
        &self.origin
    }

    fn has_tensor(&self, name: &str) -> bool {
        if name == "output.weight" && self.config.tie_word_embeddings {
            return false;
        }
        self.shape_of(name).is_some()
    }

    fn read_tensor(&mut self, name: &str) -> Result<QTensor> {
        let shape = self
            .shape_of(name)
            .ok_or_else(|| EngineError::bad_file(&self.origin, format!("missing tensor {name}")))?;
        let n: usize = shape.iter().product();
        let values: Vec<f32> = if shape.len() == 1 {
            vec![1.0; n]
        } else {
            // Seeded per tensor so every run builds the same model.
            let mut rng = SmallRng::seed_from_u64(self.seed ^ fxhash(name));
            let scale = 0.5 / (shape[shape.len() - 1] as f32).sqrt();
            (0..n).map(|_| rng.random_range(-scale..scale)).collect()
        };
        let values = match self.dtype {
            DummyDType::BF16 => values
                .into_iter()
                .map(|v| half::bf16::from_f32(v).to_f32())
                .collect(),
            _ => values,
        };
        let tensor = Tensor::from_vec(values, shape.as_slice(), &Device::Cpu)?;
        // The router stays f32, as llama.cpp's quantizer leaves `ffn_gate_inp`.
        let dtype = match shape[..] {
            _ if name.ends_with("ffn_gate_inp.weight") => GgmlDType::F32,
            [_, width] | [_, _, width] => self.dtype.matrix_dtype(width),
            _ => GgmlDType::F32,
        };
        Ok(QTensor::quantize(&tensor, dtype)?)
    }
}

impl DummyDType {
    /// How a matrix with rows of `width` is stored.
    fn matrix_dtype(self, width: usize) -> GgmlDType {
        let whole_super_blocks = width.is_multiple_of(256);
        match self {
            DummyDType::Q4_0 => GgmlDType::Q4_0,
            DummyDType::Q4_1 => GgmlDType::Q4_1,
            DummyDType::Q5_0 => GgmlDType::Q5_0,
            DummyDType::Q5_1 => GgmlDType::Q5_1,
            DummyDType::Q8_0 => GgmlDType::Q8_0,
            DummyDType::Q4K if whole_super_blocks => GgmlDType::Q4K,
            DummyDType::Q5K if whole_super_blocks => GgmlDType::Q5K,
            DummyDType::Q6K if whole_super_blocks => GgmlDType::Q6K,
            DummyDType::Q4K | DummyDType::Q5K | DummyDType::Q6K => GgmlDType::Q8_0,
            DummyDType::BF16 | DummyDType::F32 => GgmlDType::F32,
        }
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
