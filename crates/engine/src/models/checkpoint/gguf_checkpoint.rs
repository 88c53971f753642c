//! GGUF files (v1–v3): metadata, tensor directory, and tensors read on demand.

use super::{is_supported_dtype, Checkpoint};
use crate::config::model_config::{Architecture, ModelConfig, MoeConfig, RopeStyle};
use crate::config::{LayerKind, LocalAttention, SlidingWindow};
use crate::error::{EngineError, Result};
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
                        "tensor {name} has unsupported type {:?} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
                        info.ggml_dtype
                    ),
                ));
            }
        }
        let file_len = reader
            .get_ref()
            .metadata()
            .map_err(|e| EngineError::bad_file(path, e))?
            .len();
        check_tensors_fit(&content, file_len).map_err(|m| EngineError::bad_file(path, m))?;
        let config = config_from_metadata(&content)
            .and_then(|config| config.check_dimensions().map(|()| config))
            .map_err(|m| EngineError::bad_file(path, m))?;
        let mut ckpt = Self {
            path: path.to_path_buf(),
            reader,
            content,
            config,
        };
        ckpt.read_rope_freqs()?;
        Ok(ckpt)
    }

    pub fn metadata(&self) -> &std::collections::HashMap<String, Value> {
        &self.content.metadata
    }
}

impl GgufCheckpoint {
    /// llama.cpp's converter stores Llama 3's frequency scaling as a tensor, one divisor per
    /// frequency, rather than as metadata; it joins any linear scaling the metadata gave.
    fn read_rope_freqs(&mut self) -> Result<()> {
        const NAME: &str = "rope_freqs.weight";
        if !self.has_tensor(NAME) {
            return Ok(());
        }
        let half = self.config.head_dim / 2;
        let freqs = self
            .tensor(NAME, &[half])?
            .dequantize(&Device::Cpu)?
            .to_vec1::<f32>()?;
        if let Some(&bad) = freqs.iter().find(|&&f| f <= 0.0) {
            return Err(EngineError::bad_file(
                &self.path,
                format!("{NAME} holds a divisor {bad}; every one must be positive"),
            ));
        }
        let divisors = self
            .config
            .rope_freq_divisors
            .get_or_insert_with(|| vec![1.0; half]);
        for (d, &f) in divisors.iter_mut().zip(&freqs) {
            *d *= f as f64;
        }
        Ok(())
    }
}

impl Checkpoint for GgufCheckpoint {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn config_mut(&mut self) -> &mut ModelConfig {
        &mut self.config
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

/// Every tensor the directory declares must lie inside the file. Its shape is then bounded by
/// the file's size, so nothing sized from the directory, or from metadata checked against it,
/// can ask for more memory than the file could hold.
///
/// A tensor must also hold at least one element: candle reads an empty tensor's bytes into an
/// empty `Vec<u8>`, whose dangling pointer it then reinterprets as a slice of blocks that need
/// more alignment than 1 (undefined behaviour, found by `fuzz/findings`). No model has one.
fn check_tensors_fit(content: &Content, file_len: u64) -> std::result::Result<(), String> {
    for (name, info) in &content.tensor_infos {
        let dtype = info.ggml_dtype;
        if info.shape.dims().contains(&0) {
            return Err(format!(
                "tensor {name} has shape {:?}: a tensor needs at least one element",
                info.shape.dims()
            ));
        }
        let end = info
            .shape
            .dims()
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
            .and_then(|elems| {
                elems
                    .div_ceil(dtype.block_size() as u64)
                    .checked_mul(dtype.type_size() as u64)
            })
            .and_then(|bytes| {
                content
                    .tensor_data_offset
                    .checked_add(info.offset)?
                    .checked_add(bytes)
            });
        if end.is_none_or(|end| end > file_len) {
            return Err(format!(
                "tensor {name} ({dtype:?}, shape {:?} at offset {}) does not fit in the file's \
                 {file_len} bytes",
                info.shape.dims(),
                info.offset
            ));
        }
    }
    Ok(())
}

fn config_from_metadata(content: &Content) -> std::result::Result<ModelConfig, String> {
    let md = &content.metadata;
    let arch_name = md
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .ok_or("missing general.architecture")?;
    let architecture = Architecture::parse(arch_name)?;
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
        Some(info) => match info.shape.dims() {
            &[vocab, _] => vocab,
            dims => {
                return Err(format!(
                    "tensor token_embd.weight has shape {dims:?}; it must be [vocab, hidden]"
                ))
            }
        },
        None => return Err("missing tensor token_embd.weight".into()),
    };
    let head_dim = get_u("attention.key_length").unwrap_or(hidden_size / num_heads.max(1));
    // Linear RoPE scaling below sizes a table by `head_dim`, before any tensor is read: hold
    // the heads to the query projection the directory declares, whose size `open` has
    // already bounded by the file's.
    match content
        .tensor_infos
        .get("blk.0.attn_q.weight")
        .map(|info| info.shape.dims())
    {
        Some(&[rows, cols])
            if Some(rows) == num_heads.checked_mul(head_dim) && cols == hidden_size => {}
        Some(dims) => {
            return Err(format!(
                "tensor blk.0.attn_q.weight has shape {dims:?}, but the metadata gives \
                 {num_heads} heads of {head_dim} over a hidden size of {hidden_size}"
            ))
        }
        None => return Err("missing tensor blk.0.attn_q.weight".into()),
    }
    if let Ok(rotated) = get_u("rope.dimension_count") {
        if rotated != head_dim {
            return Err(format!(
                "{} is {rotated} but heads are {head_dim} wide: partial rotary embeddings are \
                 not supported",
                key("rope.dimension_count")
            ));
        }
    }
    let scaling = md
        .get(&key("rope.scaling.type"))
        .and_then(|v| v.to_string().ok())
        .map(String::as_str)
        .unwrap_or("none");
    let rope_freq_divisors = match scaling {
        "none" => None,
        "linear" => {
            let factor = get_f("rope.scaling.factor").ok_or_else(|| {
                format!("linear rope scaling without {}", key("rope.scaling.factor"))
            })?;
            Some(vec![factor as f64; head_dim / 2])
        }
        other => {
            return Err(format!(
                "unsupported rope scaling type {other:?} in {} (supported: none, linear, and \
                 Llama 3's rope_freqs tensor)",
                key("rope.scaling.type")
            ))
        }
    };
    // llama.cpp's qwen3moe routes on every layer and always renormalises the top-k weights
    // (its files carry no norm_topk_prob key).
    let moe = match architecture {
        Architecture::Qwen3Moe => {
            let moe = MoeConfig {
                num_experts: get_u("expert_count")?,
                experts_per_token: get_u("expert_used_count")?,
                expert_intermediate_size: get_u("expert_feed_forward_length")?,
                norm_topk_prob: true,
                decoder_sparse_step: 1,
                mlp_only_layers: Vec::new(),
            };
            moe.validate()?;
            Some(moe)
        }
        _ => None,
    };
    let num_layers = get_u("block_count")?;
    // llama.cpp's gemma3: no window key (or 0) means every layer global.
    let window = match architecture {
        Architecture::Gemma3 => get_u("attention.sliding_window")
            .ok()
            .and_then(SlidingWindow::new),
        _ => None,
    };
    if architecture == Architecture::Gemma3 {
        if let Some(cap) = get_f("final_logit_softcapping").filter(|&c| c != 0.0) {
            return Err(format!(
                "{} is {cap}: logit softcapping is not supported",
                key("final_logit_softcapping")
            ));
        }
    }
    let local_attention = match window {
        Some(window) => {
            Some(LocalAttention {
                window,
                layers: sliding_layers(
                    md.get(&key("attention.sliding_window_pattern")),
                    num_layers,
                )
                .map_err(|m| format!("{}: {m}", key("attention.sliding_window_pattern")))?,
                // llama.cpp's default for gemma3 files without the key.
                rope_theta: get_f("rope.freq_base_swa").unwrap_or(10_000.0) as f64,
            })
        }
        _ => None,
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
        num_layers,
        num_heads,
        num_kv_heads: get_u("attention.head_count_kv").unwrap_or(num_heads),
        head_dim,
        rms_norm_eps: get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-5) as f64,
        rope_theta: get_f("rope.freq_base").unwrap_or(10_000.0) as f64,
        rope_style: match architecture {
            Architecture::Llama => RopeStyle::AdjacentPairs,
            Architecture::Qwen2
            | Architecture::Qwen3
            | Architecture::Qwen3Moe
            | Architecture::Gemma3 => RopeStyle::HalfSplit,
        },
        rope_freq_divisors,
        max_position_embeddings: get_u("context_length").unwrap_or(4096),
        tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
        bos_token_id: md
            .get("tokenizer.ggml.bos_token_id")
            .and_then(|v| v.to_u32().ok()),
        eos_token_ids,
        moe,
        local_attention,
        // llama.cpp scales scores by `key_length^-0.5` (its converter folds any other
        // scale into the q-norm weights), but Gemma 3 27B's (62 layers) by
        // `(hidden / heads)^-0.5`, at run time.
        query_pre_attn_scalar: (architecture == Architecture::Gemma3 && num_layers == 62)
            .then(|| (hidden_size / num_heads.max(1)) as f64),
    })
}

/// Which layers slide, as llama.cpp reads a gemma3 file: from the pattern key where there
/// is one (a period, every `period`-th layer global, or one flag per layer, true where it
/// slides), else every 6th layer global.
fn sliding_layers(
    pattern: Option<&Value>,
    num_layers: usize,
) -> std::result::Result<Vec<LayerKind>, String> {
    match pattern {
        None => Ok(LocalAttention::every_nth_global(6, num_layers)),
        Some(Value::Array(flags)) => {
            if flags.len() != num_layers {
                return Err(format!("{} flags for {num_layers} layers", flags.len()));
            }
            flags
                .iter()
                .map(|f| match f {
                    Value::Bool(true) => Ok(LayerKind::Sliding),
                    Value::Bool(false) => Ok(LayerKind::Global),
                    other => Err(format!("a flag {other:?}; expected booleans")),
                })
                .collect()
        }
        Some(v) => v
            .to_u64()
            .map(|period| LocalAttention::every_nth_global(period as usize, num_layers))
            .map_err(|_| format!("{v:?} is neither a period nor per-layer flags")),
    }
}
