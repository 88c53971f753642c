//! Hugging Face model directories: config.json plus one or many safetensors shards.

use super::{hf_expert_names, hf_name, Checkpoint};
use crate::config::hf_config::HfConfig;
use crate::config::model_config::{Architecture, ModelConfig};
use crate::error::{EngineError, Result};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct HfCheckpoint {
    dir: PathBuf,
    config: ModelConfig,
    /// Tensor name → shard file holding it.
    weight_map: HashMap<String, PathBuf>,
    /// Shards already read, so each file is parsed once.
    loaded: HashMap<PathBuf, HashMap<String, Tensor>>,
}

impl HfCheckpoint {
    pub fn open(dir: &Path) -> Result<Self> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path)
            .map_err(|e| EngineError::bad_file(&config_path, e))?;
        let hf: HfConfig =
            serde_json::from_str(&text).map_err(|e| EngineError::bad_file(&config_path, e))?;
        let config = hf
            .into_model_config()
            .map_err(|m| EngineError::bad_file(&config_path, m))?;
        let weight_map = read_weight_map(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            weight_map,
            loaded: HashMap::new(),
        })
    }
}

fn read_weight_map(dir: &Path) -> Result<HashMap<String, PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    let single = dir.join("model.safetensors");
    if index.exists() {
        #[derive(serde::Deserialize)]
        struct Index {
            weight_map: HashMap<String, String>,
        }
        let text = std::fs::read_to_string(&index).map_err(|e| EngineError::bad_file(&index, e))?;
        let parsed: Index =
            serde_json::from_str(&text).map_err(|e| EngineError::bad_file(&index, e))?;
        Ok(parsed
            .weight_map
            .into_iter()
            .map(|(name, file)| (name, dir.join(file)))
            .collect())
    } else if single.exists() {
        let names = read_safetensors_names(&single)?;
        Ok(names.into_iter().map(|n| (n, single.clone())).collect())
    } else {
        Err(EngineError::bad_file(
            dir,
            "no model.safetensors or model.safetensors.index.json",
        ))
    }
}

/// Reads only the JSON header of a safetensors file to learn its tensor names.
fn read_safetensors_names(path: &Path) -> Result<Vec<String>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| EngineError::bad_file(path, e))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| EngineError::bad_file(path, "truncated safetensors header"))?;
    let len = u64::from_le_bytes(len);
    let file_len = file.metadata()?.len();
    if len > file_len.saturating_sub(8) {
        return Err(EngineError::bad_file(
            path,
            format!("safetensors header claims {len} bytes but the file has {file_len}"),
        ));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|_| EngineError::bad_file(path, "truncated safetensors header"))?;
    let parsed: HashMap<String, serde_json::Value> = serde_json::from_slice(&header)
        .map_err(|e| EngineError::bad_file(path, format!("bad safetensors header: {e}")))?;
    Ok(parsed.into_keys().filter(|k| k != "__metadata__").collect())
}

impl Checkpoint for HfCheckpoint {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn config_mut(&mut self) -> &mut ModelConfig {
        &mut self.config
    }

    fn origin(&self) -> &Path {
        &self.dir
    }

    fn has_tensor(&self, name: &str) -> bool {
        if let Some(experts) = self.expert_names(name) {
            return experts.iter().all(|n| self.weight_map.contains_key(n));
        }
        hf_name(self.config.architecture, name).is_some_and(|n| self.weight_map.contains_key(&n))
    }

    fn read_tensor(&mut self, name: &str) -> Result<QTensor> {
        // Experts are stored one file tensor each; the model reads them stacked, as GGUF
        // keeps them.
        let f32 = if let Some(experts) = self.expert_names(name) {
            let parts = experts
                .iter()
                .map(|hf| self.read_f32(hf))
                .collect::<Result<Vec<_>>>()?;
            Tensor::stack(&parts, 0)
                .map_err(|e| EngineError::bad_file(&self.dir, format!("experts of {name}: {e}")))?
        } else {
            let hf = hf_name(self.config.architecture, name).ok_or_else(|| {
                EngineError::bad_file(&self.dir, format!("missing tensor {name}"))
            })?;
            let weight = self.read_f32(&hf)?;
            // Gemma's RMSNorm scales by `1 + w` and its checkpoints store `w`; the model reads
            // norm weights as GGUF stores them (llama.cpp's converter adds the 1).
            if self.config.architecture == Architecture::Gemma3 && name.ends_with("norm.weight") {
                (weight + 1.0)
                    .map_err(|e| EngineError::bad_file(&self.dir, format!("tensor {hf}: {e}")))?
            } else {
                weight
            }
        };
        Ok(QTensor::quantize(&f32, GgmlDType::F32)?)
    }
}

impl HfCheckpoint {
    /// Per-expert names of a stacked expert tensor, for a sparse model.
    fn expert_names(&self, gguf_name: &str) -> Option<Vec<String>> {
        let experts = self.config.moe.as_ref()?.num_experts;
        hf_expert_names(gguf_name, experts)
    }

    /// One file tensor by its Hugging Face name, in f32.
    fn read_f32(&mut self, hf: &str) -> Result<Tensor> {
        let file = self
            .weight_map
            .get(hf)
            .ok_or_else(|| EngineError::bad_file(&self.dir, format!("missing tensor {hf}")))?
            .clone();
        if !self.loaded.contains_key(&file) {
            let tensors = candle_core::safetensors::load(&file, &Device::Cpu).map_err(|e| {
                EngineError::bad_file(&file, format!("unreadable safetensors: {e}"))
            })?;
            self.loaded.insert(file.clone(), tensors);
        }
        let tensor = self.loaded[&file]
            .get(hf)
            .ok_or_else(|| EngineError::bad_file(&file, format!("missing tensor {hf}")))?;
        // Float checkpoints are computed in f32: candle has no fast BF16/F16 CPU matmul.
        tensor
            .to_dtype(DType::F32)
            .map_err(|e| EngineError::bad_file(&file, format!("tensor {hf}: {e}")))
    }
}
