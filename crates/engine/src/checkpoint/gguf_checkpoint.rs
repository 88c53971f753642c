//! GGUF files (v1–v3): metadata, tensor directory, and tensors read on demand.

use super::{is_supported_dtype, Checkpoint};
use crate::error::{EngineError, Result};
use crate::model_config::{Architecture, ModelConfig, RopeStyle};
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::QTensor;
use candle_core::Device;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

pub struct GgufCheckpoint {
    path: PathBuf,
    reader: BufReader<File>,
    content: Content,
    config: ModelConfig,
}

impl GgufCheckpoint {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| EngineError::bad_file(path, e))?;
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader)
            .map_err(|e| EngineError::bad_file(path, format!("not a readable GGUF file: {e}")))?;
        for (name, info) in &content.tensor_infos {
            if !is_supported_dtype(info.ggml_dtype) {
                return Err(EngineError::bad_file(
                    path,
                    format!(
                        "tensor {name} has unsupported type {:?} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)",
                        info.ggml_dtype
                    ),
                ));
            }
        }
        let config = config_from_metadata(&content).map_err(|m| EngineError::bad_file(path, m))?;
        Ok(Self {
            path: path.to_path_buf(),
            reader,
            content,
            config,
        })
    }

    pub fn metadata(&self) -> &std::collections::HashMap<String, Value> {
        &self.content.metadata
    }
}

impl Checkpoint for GgufCheckpoint {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn origin(&self) -> &Path {
        &self.path
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn read_tensor(&mut self, name: &str) -> Result<QTensor> {
        self.content
            .tensor(&mut self.reader, name, &Device::Cpu)
            .map_err(|e| EngineError::bad_file(&self.path, format!("tensor {name}: {e}")))
    }
}

fn config_from_metadata(content: &Content) -> std::result::Result<ModelConfig, String> {
    let md = &content.metadata;
    let arch_name = md
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .ok_or("missing general.architecture")?;
    let architecture = Architecture::from_name(arch_name)
        .ok_or_else(|| format!("unknown architecture {arch_name:?} (supported: llama, qwen3)"))?;
    let key = |k: &str| format!("{arch_name}.{k}");
    let get_u = |k: &str| -> std::result::Result<usize, String> {
        md.get(&key(k))
            .and_then(|v| v.to_u64().ok())
            .map(|v| v as usize)
            .ok_or_else(|| format!("missing or non-integer metadata {}", key(k)))
    };
    let get_f = |k: &str| md.get(&key(k)).and_then(|v| v.to_f32().ok());
    let hidden_size = get_u("embedding_length")?;
    let num_heads = get_u("attention.head_count")?;
    let vocab_size = match content.tensor_infos.get("token_embd.weight") {
        Some(info) => info.shape.dims()[0],
        None => return Err("missing tensor token_embd.weight".into()),
    };
    let eos_token_ids = md
        .get("tokenizer.ggml.eos_token_id")
        .and_then(|v| v.to_u32().ok())
        .into_iter()
        .collect();
    Ok(ModelConfig {
        architecture,
        vocab_size,
        hidden_size,
        intermediate_size: get_u("feed_forward_length")?,
        num_layers: get_u("block_count")?,
        num_heads,
        num_kv_heads: get_u("attention.head_count_kv").unwrap_or(num_heads),
        head_dim: get_u("attention.key_length").unwrap_or(hidden_size / num_heads.max(1)),
        rms_norm_eps: get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-5) as f64,
        rope_theta: get_f("rope.freq_base").unwrap_or(10_000.0) as f64,
        rope_style: match architecture {
            Architecture::Llama => RopeStyle::AdjacentPairs,
            Architecture::Qwen3 => RopeStyle::HalfSplit,
        },
        max_position_embeddings: get_u("context_length").unwrap_or(4096),
        tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
        bos_token_id: md
            .get("tokenizer.ggml.bos_token_id")
            .and_then(|v| v.to_u32().ok()),
        eos_token_ids,
    })
}
