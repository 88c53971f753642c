//! A tiny random Llama written by the tests themselves, as a Hugging Face directory
//! (config.json + safetensors) and as a GGUF file, so loaders can be checked end to end.

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const VOCAB: usize = 100;
pub const HIDDEN: usize = 64;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 16;
pub const FFN: usize = 128;
pub const LAYERS: usize = 2;

/// HF-named tensors of a random tiny Llama, deterministic for a seed.
pub fn hf_tensors(seed: u64) -> Vec<(String, Tensor)> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut random = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
            })
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    };
    let mut t = vec![
        (
            "model.embed_tokens.weight".to_string(),
            random(&[VOCAB, HIDDEN]),
        ),
        ("lm_head.weight".to_string(), random(&[VOCAB, HIDDEN])),
        (
            "model.norm.weight".to_string(),
            random(&[HIDDEN]).affine(0.5, 1.0).unwrap(),
        ),
    ];
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        t.push((
            format!("{p}.input_layernorm.weight"),
            random(&[HIDDEN]).affine(0.5, 1.0).unwrap(),
        ));
        t.push((
            format!("{p}.post_attention_layernorm.weight"),
            random(&[HIDDEN]).affine(0.5, 1.0).unwrap(),
        ));
        t.push((
            format!("{p}.self_attn.q_proj.weight"),
            random(&[HEADS * HEAD_DIM, HIDDEN]),
        ));
        t.push((
            format!("{p}.self_attn.k_proj.weight"),
            random(&[KV_HEADS * HEAD_DIM, HIDDEN]),
        ));
        t.push((
            format!("{p}.self_attn.v_proj.weight"),
            random(&[KV_HEADS * HEAD_DIM, HIDDEN]),
        ));
        t.push((
            format!("{p}.self_attn.o_proj.weight"),
            random(&[HIDDEN, HEADS * HEAD_DIM]),
        ));
        t.push((format!("{p}.mlp.gate_proj.weight"), random(&[FFN, HIDDEN])));
        t.push((format!("{p}.mlp.up_proj.weight"), random(&[FFN, HIDDEN])));
        t.push((format!("{p}.mlp.down_proj.weight"), random(&[HIDDEN, FFN])));
    }
    t
}

pub fn write_hf_dir(dir: &Path, seed: u64) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": FFN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 128,
        "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let map: HashMap<String, Tensor> = hf_tensors(seed).into_iter().collect();
    candle_core::safetensors::save(&map, dir.join("model.safetensors")).unwrap();
    dir.to_path_buf()
}

/// GGUF's converter reorders each Q/K head's rows so rotary pairs are adjacent.
fn permute_for_gguf(w: &Tensor, heads: usize) -> Tensor {
    let (rows, cols) = w.dims2().unwrap();
    let hd = rows / heads;
    w.reshape((heads, 2, hd / 2, cols))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((rows, cols))
        .unwrap()
}

pub fn gguf_name(hf: &str) -> String {
    let fixed = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("lm_head.weight", "output.weight"),
        ("model.norm.weight", "output_norm.weight"),
    ];
    if let Some((_, g)) = fixed.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (layer, leaf) = rest.split_once('.').unwrap();
    let leaf = match leaf {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        other => panic!("unmapped {other}"),
    };
    format!("blk.{layer}.{leaf}")
}

/// Options for writing a (possibly deliberately broken) GGUF.
pub struct GgufSpec<'a> {
    pub architecture: &'a str,
    pub skip_tensor: Option<&'a str>,
    /// Store this tensor in another type.
    pub retype: Option<(&'a str, GgmlDType)>,
    /// Metadata entries added, or replacing the tiny model's own.
    pub metadata: &'a [(&'a str, Value)],
}

impl Default for GgufSpec<'_> {
    fn default() -> Self {
        Self {
            architecture: "llama",
            skip_tensor: None,
            retype: None,
            metadata: &[],
        }
    }
}

pub fn write_gguf(path: &Path, seed: u64, spec: &GgufSpec) {
    let arch = spec.architecture;
    let meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (format!("{arch}.block_count"), Value::U32(LAYERS as u32)),
        (format!("{arch}.context_length"), Value::U32(128)),
        (
            format!("{arch}.embedding_length"),
            Value::U32(HIDDEN as u32),
        ),
        (
            format!("{arch}.feed_forward_length"),
            Value::U32(FFN as u32),
        ),
        (
            format!("{arch}.attention.head_count"),
            Value::U32(HEADS as u32),
        ),
        (
            format!("{arch}.attention.head_count_kv"),
            Value::U32(KV_HEADS as u32),
        ),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        ),
        (format!("{arch}.rope.freq_base"), Value::F32(10000.0)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
    ];
    let mut meta = meta;
    for (key, value) in spec.metadata {
        meta.retain(|(k, _)| k != key);
        meta.push((key.to_string(), value.clone()));
    }
    let mut tensors = Vec::new();
    for (hf, t) in hf_tensors(seed) {
        let name = gguf_name(&hf);
        if spec.skip_tensor == Some(name.as_str()) {
            continue;
        }
        let t = if name.ends_with("attn_q.weight") {
            permute_for_gguf(&t, HEADS)
        } else if name.ends_with("attn_k.weight") {
            permute_for_gguf(&t, KV_HEADS)
        } else {
            t
        };
        let dtype = match spec.retype {
            Some((n, d)) if n == name => d,
            _ => GgmlDType::F32,
        };
        tensors.push((name, QTensor::quantize(&t, dtype).unwrap()));
    }
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &meta_refs, &tensor_refs).unwrap();
}
