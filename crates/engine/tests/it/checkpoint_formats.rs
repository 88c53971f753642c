//! Loaders: the same tiny model as safetensors and as GGUF gives the same logits, and
//! broken files fail with an error naming the file and the problem (never a panic).

use crate::common;

use candle_core::quantized::GgmlDType;
use common::tiny_llama::{self, GgufSpec};
use std::path::Path;
use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::config::WeightMode;
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kv::kv_cache::KvCache;
use tokenmill_engine::models::checkpoint::{self, Checkpoint};
use tokenmill_engine::models::DecoderModel;
use tokenmill_engine::{Engine, EngineConfig};

fn logits_of(path: &Path, prompt: &[u32]) -> Vec<f32> {
    let mut ckpt = checkpoint::open(path).unwrap();
    let model = DecoderModel::load(ckpt.as_mut(), WeightMode::F32, 128).unwrap();
    let c = model.config().clone();
    let mut kv = KvCache::new(c.num_layers, 8, 16, c.kv_heads(), KvCacheDtype::F32);
    // Block ids are only minted by a block manager.
    let table = tokenmill_engine::kv::block_manager::BlockManager::new(8, 16, false)
        .allocate(8)
        .unwrap();
    let mut logits = Vec::new();
    // Every position's logits: prefill each prefix length separately.
    for end in 1..=prompt.len() {
        let mut batch = ForwardBatch::default();
        batch.push_seq(&prompt[..end], 0, &table, 16, true);
        logits.extend(model.forward(&batch, &mut kv).unwrap());
    }
    logits
}

#[test]
fn safetensors_and_gguf_f32_of_one_tiny_llama_give_the_same_logits() {
    let dir = tempdir("formats");
    let hf = tiny_llama::write_hf_dir(&dir.join("hf"), 7);
    let gguf = dir.join("tiny.gguf");
    tiny_llama::write_gguf(&gguf, 7, &GgufSpec::default());
    let prompt = [3, 17, 42, 99, 5, 8, 13, 21, 34, 55];
    let (a, b) = (logits_of(&hf, &prompt), logits_of(&gguf, &prompt));
    assert_eq!(a.len(), prompt.len() * tiny_llama::VOCAB);
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "logits differ by {worst}");
    // Sanity: the model is not trivially constant.
    let spread =
        a.iter().copied().fold(f32::MIN, f32::max) - a.iter().copied().fold(f32::MAX, f32::min);
    assert!(spread > 0.1);
}

#[test]
fn sharded_safetensors_with_an_index_load_like_a_single_file() {
    let dir = tempdir("sharded");
    let single = tiny_llama::write_hf_dir(&dir.join("single"), 3);
    let sharded = dir.join("sharded");
    std::fs::create_dir_all(&sharded).unwrap();
    std::fs::copy(single.join("config.json"), sharded.join("config.json")).unwrap();
    let tensors = tiny_llama::hf_tensors(3);
    let (first, second) = tensors.split_at(tensors.len() / 2);
    let mut weight_map = serde_json::Map::new();
    for (i, part) in [first, second].iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i + 1);
        let map: std::collections::HashMap<_, _> = part.iter().cloned().collect();
        candle_core::safetensors::save(&map, sharded.join(&file)).unwrap();
        for (name, _) in part.iter() {
            weight_map.insert(name.clone(), file.clone().into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(
        sharded.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let prompt = [1, 2, 3, 4];
    assert_eq!(logits_of(&single, &prompt), logits_of(&sharded, &prompt));
}

fn load_error(path: &Path) -> String {
    let result = checkpoint::open(path).and_then(|mut ckpt: Box<dyn Checkpoint>| {
        Engine::load(
            ckpt.as_mut(),
            EngineConfig {
                num_kv_blocks: Some(8),
                ..EngineConfig::default()
            },
        )
    });
    match result {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(e) => e.to_string(),
    }
}

fn assert_names(err: &str, path: &Path, problem: &str) {
    assert!(
        err.contains(&path.display().to_string()),
        "error does not name the file: {err}"
    );
    assert!(
        err.contains(problem),
        "error does not say {problem:?}: {err}"
    );
}

#[test]
fn truncated_gguf_fails_naming_the_file() {
    let dir = tempdir("trunc-gguf");
    let path = dir.join("tiny.gguf");
    tiny_llama::write_gguf(&path, 1, &GgufSpec::default());
    let bytes = std::fs::read(&path).unwrap();
    // Cut inside the tensor data, then inside the header.
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    assert_names(&load_error(&path), &path, "does not fit in the file");
    std::fs::write(&path, &bytes[..40]).unwrap();
    assert_names(&load_error(&path), &path, "not a readable GGUF file");
}

/// A GGUF v3 file by hand: `u32` metadata values and one F32 tensor of any rank (candle's
/// writer cannot write a rank-0 tensor, which is what a corrupt file may declare).
fn handmade_gguf(metadata: &[(&str, u32)], tensor: &str, dims: &[u64]) -> Vec<u8> {
    let string = |s: &str| [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat();
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(1u64.to_le_bytes());
    out.extend((metadata.len() as u64 + 1).to_le_bytes());
    out.extend(string("general.architecture"));
    out.extend(8u32.to_le_bytes());
    out.extend(string("llama"));
    for &(key, value) in metadata {
        out.extend(string(key));
        out.extend(4u32.to_le_bytes());
        out.extend(value.to_le_bytes());
    }
    out.extend(string(tensor));
    out.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        out.extend(d.to_le_bytes());
    }
    out.extend(0u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.resize(out.len().next_multiple_of(32), 0);
    let elems: u64 = dims.iter().product();
    out.resize(out.len() + 4 * elems as usize, 0);
    out
}

// Seen while writing the `fuzz/` gguf target: a rank-0 token embedding was indexed for its
// first dimension, a panic.
#[test]
fn a_token_embedding_that_is_not_a_matrix_is_refused() {
    let dir = tempdir("rank0-embd");
    let path = dir.join("rank0.gguf");
    let meta = [
        ("llama.embedding_length", 64),
        ("llama.attention.head_count", 4),
    ];
    std::fs::write(&path, handmade_gguf(&meta, "token_embd.weight", &[])).unwrap();
    assert_names(
        &load_error(&path),
        &path,
        "token_embd.weight has shape []; it must be [vocab, hidden]",
    );
}

// Linear RoPE scaling built a table of `head_dim / 2` divisors straight from the metadata:
// a 1 KiB file asking for 2^40-wide heads asked for 4 TiB.
#[test]
fn heads_wider_than_the_query_projection_are_refused_before_anything_is_sized_by_them() {
    use candle_core::quantized::gguf_file::Value;
    let dir = tempdir("wide-heads");
    let path = dir.join("tiny.gguf");
    let metadata = [
        ("llama.attention.key_length", Value::U64(1 << 40)),
        ("llama.rope.scaling.type", Value::String("linear".into())),
        ("llama.rope.scaling.factor", Value::F32(2.0)),
    ];
    let spec = GgufSpec {
        metadata: &metadata,
        ..GgufSpec::default()
    };
    tiny_llama::write_gguf(&path, 1, &spec);
    assert_names(
        &load_error(&path),
        &path,
        "blk.0.attn_q.weight has shape [64, 64], but the metadata gives 4 heads of 1099511627776",
    );
}

#[test]
fn key_value_heads_that_cannot_serve_the_query_heads_are_refused_by_name() {
    use candle_core::quantized::gguf_file::Value;
    for (kv_heads, problem) in [
        (0, "num_kv_heads is 0"),
        (3, "4 query heads cannot share 3 key/value heads evenly"),
    ] {
        let dir = tempdir(&format!("kv-heads-{kv_heads}"));
        let path = dir.join("tiny.gguf");
        let metadata = [("llama.attention.head_count_kv", Value::U32(kv_heads))];
        let spec = GgufSpec {
            metadata: &metadata,
            ..GgufSpec::default()
        };
        tiny_llama::write_gguf(&path, 1, &spec);
        assert_names(&load_error(&path), &path, problem);
    }
}

#[test]
fn truncated_safetensors_fails_naming_the_file() {
    let dir = tempdir("trunc-st");
    let hf = tiny_llama::write_hf_dir(&dir.join("hf"), 1);
    let file = hf.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 1000]).unwrap();
    assert_names(&load_error(&hf), &file, "unreadable safetensors");
    std::fs::write(&file, &bytes[..4]).unwrap();
    assert_names(&load_error(&hf), &file, "truncated safetensors header");
}

#[test]
fn unknown_architecture_is_named() {
    let dir = tempdir("arch");
    let path = dir.join("tiny.gguf");
    tiny_llama::write_gguf(
        &path,
        1,
        &GgufSpec {
            architecture: "gpt5",
            ..GgufSpec::default()
        },
    );
    assert_names(&load_error(&path), &path, "unknown architecture \"gpt5\"");
}

#[test]
fn unsupported_tensor_type_is_named_with_its_tensor() {
    let dir = tempdir("dtype");
    let path = dir.join("tiny.gguf");
    // Q8_1: ggml's activation format, which no model file stores and we do not load.
    let spec = GgufSpec {
        retype: Some(("blk.0.ffn_up.weight", GgmlDType::Q8_1)),
        ..GgufSpec::default()
    };
    tiny_llama::write_gguf(&path, 1, &spec);
    let err = load_error(&path);
    assert_names(
        &err,
        &path,
        "tensor blk.0.ffn_up.weight has unsupported type Q8_1",
    );
    assert_names(
        &err,
        &path,
        "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
    );
}

/// Logits of every prefix of `prompt` with the weights kept in `mode`.
fn logits_in(path: &Path, prompt: &[u32], mode: WeightMode) -> Vec<f32> {
    let mut ckpt = checkpoint::open(path).unwrap();
    let model = DecoderModel::load(ckpt.as_mut(), mode, 128).unwrap();
    let c = model.config().clone();
    let mut kv = KvCache::new(c.num_layers, 8, 16, c.kv_heads(), KvCacheDtype::F32);
    let table = tokenmill_engine::kv::block_manager::BlockManager::new(8, 16, false)
        .allocate(8)
        .unwrap();
    let mut logits = Vec::new();
    for end in 1..=prompt.len() {
        let mut batch = ForwardBatch::default();
        batch.push_seq(&prompt[..end], 0, &table, 16, true);
        logits.extend(model.forward(&batch, &mut kv).unwrap());
    }
    logits
}

/// A file with a Q5_0 or Q5_1 projection loads, runs it on the quantized kernels, and
/// gives about the logits of the same weights dequantized to f32 (the activations'
/// rounding to int8 is the difference). `quant_matrix.rs` checks such a layer keeps the
/// file's bits.
#[test]
fn gguf_tensors_in_q5_0_and_q5_1_load_and_give_about_the_f32_logits() {
    for dtype in [GgmlDType::Q5_0, GgmlDType::Q5_1] {
        let dir = tempdir(&format!("{dtype:?}"));
        let path = dir.join("tiny.gguf");
        let spec = GgufSpec {
            retype: Some(("blk.0.ffn_up.weight", dtype)),
            ..GgufSpec::default()
        };
        tiny_llama::write_gguf(&path, 5, &spec);
        let prompt = [3, 17, 42, 99, 5];
        let quantized = logits_in(&path, &prompt, WeightMode::Quantized);
        let exact = logits_in(&path, &prompt, WeightMode::F32);
        let worst = quantized
            .iter()
            .zip(&exact)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        let spread = exact.iter().copied().fold(f32::MIN, f32::max)
            - exact.iter().copied().fold(f32::MAX, f32::min);
        assert!(
            worst < 0.05 * spread,
            "{dtype:?}: logits differ by {worst} of {spread}"
        );
    }
}

#[test]
fn missing_tensor_is_named() {
    let dir = tempdir("missing");
    let path = dir.join("tiny.gguf");
    tiny_llama::write_gguf(
        &path,
        1,
        &GgufSpec {
            skip_tensor: Some("blk.1.ffn_down.weight"),
            ..GgufSpec::default()
        },
    );
    assert_names(
        &load_error(&path),
        &path,
        "missing tensor blk.1.ffn_down.weight",
    );
}

#[test]
fn a_path_that_does_not_exist_is_named() {
    let path = std::env::temp_dir().join("tokenmill-no-such-model.gguf");
    assert_names(&load_error(&path), &path, "no such file");
}

#[test]
fn dummy_weights_build_models_of_the_published_shapes_that_generate() {
    use tokenmill_engine::models::checkpoint::{DummyCheckpoint, DummyDType};
    // (shape, hidden, layers, heads, KV heads, head_dim, vocab)
    let shapes = [
        ("qwen3-0.6b", 1024, 28, 16, 8, 128, 151_936),
        ("qwen2.5-0.5b", 896, 24, 14, 2, 64, 151_936),
        ("llama-3.2-1b", 2048, 16, 32, 8, 64, 128_256),
    ];
    for (name, hidden, layers, heads, kv_heads, head_dim, vocab) in shapes {
        let mut ckpt = DummyCheckpoint::new(name, DummyDType::Q4_0, 0).unwrap();
        let c = ckpt.config().clone();
        assert_eq!(
            (
                c.hidden_size,
                c.num_layers,
                c.num_heads,
                c.num_kv_heads,
                c.head_dim,
                c.vocab_size
            ),
            (hidden, layers, heads, kv_heads, head_dim, vocab),
            "{name}"
        );
        let mut engine = Engine::load(
            &mut ckpt,
            EngineConfig {
                num_kv_blocks: Some(16),
                ..EngineConfig::default()
            },
        )
        .unwrap();
        let done = engine
            .generate(vec![tokenmill_engine::Request {
                prompt: vec![1, 2, 3],
                params: tokenmill_engine::SamplingParams {
                    ignore_eos: true,
                    ..tokenmill_engine::SamplingParams::greedy(2)
                },
                priority: 0,
                constraint: None,
            }])
            .unwrap();
        assert_eq!(done[0].tokens.len(), 2, "{name}");
    }
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenmill-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn k_quant_dummy_matrices_fall_back_to_q8_0_where_rows_are_not_whole_256_blocks() {
    use tokenmill_engine::models::checkpoint::{DummyCheckpoint, DummyDType};
    for (name, dtype, want) in [
        ("q4_k", DummyDType::Q4K, GgmlDType::Q4K),
        ("q5_k", DummyDType::Q5K, GgmlDType::Q5K),
        ("q6_k", DummyDType::Q6K, GgmlDType::Q6K),
    ] {
        assert_eq!(name.parse::<DummyDType>(), Ok(dtype));
        // SmolLM2: width 576 (not whole 256-blocks), intermediate 1536 (six of them).
        let mut ckpt = DummyCheckpoint::new("smollm2-135m", dtype, 0).unwrap();
        let down = ckpt.read_tensor("blk.0.ffn_down.weight").unwrap();
        let q = ckpt.read_tensor("blk.0.attn_q.weight").unwrap();
        let norm = ckpt.read_tensor("blk.0.attn_norm.weight").unwrap();
        assert_eq!(
            (down.dtype(), q.dtype(), norm.dtype()),
            (want, GgmlDType::Q8_0, GgmlDType::F32),
            "{name}"
        );
    }
}
