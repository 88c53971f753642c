//! Checkpoints: a model's config plus its tensors, fetched by their GGUF names.
//!
//! Every format (GGUF, Hugging Face safetensors, random "dummy" weights) answers the same
//! two questions, so the model code is written once against GGUF's tensor names.

mod dummy_checkpoint;
mod finite_weights;
mod gguf_checkpoint;
mod hf_checkpoint;

pub use dummy_checkpoint::{DummyCheckpoint, DummyDType};
pub use gguf_checkpoint::GgufCheckpoint;
pub use hf_checkpoint::HfCheckpoint;

use crate::config::model_config::{Architecture, ModelConfig};
use crate::error::{EngineError, Result};
use candle_core::quantized::{GgmlDType, QTensor};
use std::path::{Path, PathBuf};

/// The default model's file name, as `scripts/fetch-model.sh` caches it.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where `scripts/fetch-model.sh` caches the default model: `$TOKENMILL_MODEL` if set,
/// else [`DEFAULT_MODEL_FILE`] in `$TOKENMILL_MODEL_DIR`, else in
/// `${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/models`. The server's default and every test
/// that needs the real model read it from here, so the rules live in one place.
pub fn default_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TOKENMILL_MODEL") {
        return PathBuf::from(p);
    }
    let dir = std::env::var_os("TOKENMILL_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
                });
            cache.join("tokenmill/models")
        });
    dir.join(DEFAULT_MODEL_FILE)
}

pub trait Checkpoint {
    fn config(&self) -> &ModelConfig;
    /// The config the model will be built from, for `--hf-overrides` to change before any
    /// tensor is read.
    fn config_mut(&mut self) -> &mut ModelConfig;
    /// Where the weights come from, for error messages.
    fn origin(&self) -> &Path;
    fn has_tensor(&self, name: &str) -> bool;
    /// Reads one tensor (shape `[out, in]` for matrices, as PyTorch orders them).
    fn read_tensor(&mut self, name: &str) -> Result<QTensor>;

    /// Reads a tensor and checks its shape and that its values are finite, so a malformed or
    /// corrupt file fails with the tensor's name.
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(EngineError::bad_file(
                self.origin(),
                format!("missing tensor {name}"),
            ));
        }
        let t = self.read_tensor(name)?;
        if t.shape().dims() != shape {
            return Err(EngineError::bad_file(
                self.origin(),
                format!(
                    "tensor {name} has shape {:?}, expected {shape:?}",
                    t.shape().dims()
                ),
            ));
        }
        let bytes = t
            .data()
            .map_err(|e| EngineError::bad_file(self.origin(), format!("tensor {name}: {e}")))?;
        if let Some(at) = finite_weights::first_non_finite(t.dtype(), &bytes) {
            return Err(EngineError::bad_file(
                self.origin(),
                format!(
                    "tensor {name} holds NaN or infinite values (first at {at}); the file is \
                     corrupt, and no output computed from it would mean anything"
                ),
            ));
        }
        drop(bytes);
        Ok(t)
    }
}

/// Opens a `.gguf` file or a Hugging Face model directory.
pub fn open(path: &Path) -> Result<Box<dyn Checkpoint>> {
    if path.is_dir() {
        Ok(Box::new(HfCheckpoint::open(path)?))
    } else if path.exists() {
        Ok(Box::new(GgufCheckpoint::open(path)?))
    } else {
        Err(EngineError::bad_file(path, "no such file or directory"))
    }
}

/// The tensor types we load; anything else is rejected by name rather than misread.
pub(crate) fn is_supported_dtype(dtype: GgmlDType) -> bool {
    use GgmlDType::*;
    matches!(
        dtype,
        F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q4K | Q5K | Q6K
    )
}

/// Maps a GGUF tensor name to its Hugging Face name in a checkpoint of `architecture`.
/// Gemma 3 has four norms a layer, and its `post_attention_layernorm` is the one after
/// attention; Llama's of that name is the one before the MLP (GGUF's `ffn_norm`).
pub(crate) fn hf_name(architecture: Architecture, gguf_name: &str) -> Option<String> {
    let fixed = match gguf_name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, leaf) = rest.split_once('.')?;
    let hf_leaf = match (architecture, leaf) {
        (Architecture::Gemma3, "ffn_norm.weight") => "pre_feedforward_layernorm.weight",
        (Architecture::Gemma3, "post_attention_norm.weight") => "post_attention_layernorm.weight",
        (Architecture::Gemma3, "post_ffw_norm.weight") => "post_feedforward_layernorm.weight",
        (_, leaf) => match leaf {
            "attn_norm.weight" => "input_layernorm.weight",
            "attn_q.weight" => "self_attn.q_proj.weight",
            "attn_k.weight" => "self_attn.k_proj.weight",
            "attn_v.weight" => "self_attn.v_proj.weight",
            "attn_output.weight" => "self_attn.o_proj.weight",
            "attn_q.bias" => "self_attn.q_proj.bias",
            "attn_k.bias" => "self_attn.k_proj.bias",
            "attn_v.bias" => "self_attn.v_proj.bias",
            "attn_q_norm.weight" => "self_attn.q_norm.weight",
            "attn_k_norm.weight" => "self_attn.k_norm.weight",
            "ffn_norm.weight" => "post_attention_layernorm.weight",
            "ffn_gate.weight" => "mlp.gate_proj.weight",
            "ffn_up.weight" => "mlp.up_proj.weight",
            "ffn_down.weight" => "mlp.down_proj.weight",
            "ffn_gate_inp.weight" => "mlp.gate.weight",
            _ => return None,
        },
    };
    Some(format!("model.layers.{layer}.{hf_leaf}"))
}

/// The Hugging Face names of the experts that GGUF stacks as one `[experts, out, in]` tensor
/// (`blk.N.ffn_gate_exps.weight` ← `model.layers.N.mlp.experts.E.gate_proj.weight`, for
/// every `E`), or `None` for any other name.
pub(crate) fn hf_expert_names(gguf_name: &str, num_experts: usize) -> Option<Vec<String>> {
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, leaf) = rest.split_once('.')?;
    let proj = match leaf {
        "ffn_gate_exps.weight" => "gate_proj",
        "ffn_up_exps.weight" => "up_proj",
        "ffn_down_exps.weight" => "down_proj",
        _ => return None,
    };
    Some(
        (0..num_experts)
            .map(|e| format!("model.layers.{layer}.mlp.experts.{e}.{proj}.weight"))
            .collect(),
    )
}
