//! Shared test helpers: the cached default model, the golden reference, a tiny model writer.
#![allow(dead_code)]

pub mod tiny_llama;

use std::path::PathBuf;
use tokenmill_engine::checkpoint::GgufCheckpoint;
use tokenmill_engine::{Engine, EngineConfig};

/// The default model; a missing file fails the test with the command that fetches it.
pub fn model_path() -> PathBuf {
    let path = match std::env::var_os("TOKENMILL_MODEL") {
        Some(p) => PathBuf::from(p),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                });
            let dir = std::env::var_os("TOKENMILL_MODEL_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| cache.join("tokenmill/models"));
            dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
        }
    };
    assert!(
        path.exists(),
        "default model not found at {}: run scripts/fetch-model.sh first",
        path.display()
    );
    path
}

pub fn load_engine(config: EngineConfig) -> Engine {
    let mut ckpt = GgufCheckpoint::open(&model_path()).expect("default model opens");
    Engine::load(&mut ckpt, config).expect("default model loads")
}

#[derive(serde::Deserialize)]
pub struct Golden {
    pub cases: Vec<GoldenCase>,
}

#[derive(serde::Deserialize)]
pub struct GoldenCase {
    pub name: String,
    pub prompt_ids: Vec<u32>,
    pub prompt_argmax: Vec<u32>,
    pub first_step_top10: Vec<(u32, f64)>,
    pub greedy_ids: Vec<u32>,
    pub greedy_top1_margin: Vec<f64>,
}

pub fn golden() -> Golden {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/golden/smollm2-golden.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden JSON parses")
}
