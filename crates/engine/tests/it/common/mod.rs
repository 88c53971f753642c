//! Shared test helpers: the cached default model, the golden reference, a tiny model writer.
#![allow(dead_code)]

pub mod model;
mod reference;
pub mod tiny_llama;

pub(crate) use model::skip_without_model;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use reference::{golden, golden_case, model_path, Golden, GoldenCase};

use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::config::WeightMode;
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kv::block_manager::BlockManager;
use tokenmill_engine::kv::kv_cache::KvCache;
use tokenmill_engine::models::checkpoint::GgufCheckpoint;
use tokenmill_engine::models::DecoderModel;
use tokenmill_engine::{Engine, EngineConfig};

pub fn load_engine(config: EngineConfig) -> Engine {
    let mut ckpt = GgufCheckpoint::open(&model_path()).expect("default model opens");
    Engine::load(&mut ckpt, config).expect("default model loads")
}

/// The default model loaded as a bare [`DecoderModel`] (no engine), for tests that read logits.
pub fn load_model(mode: WeightMode) -> DecoderModel {
    let mut ckpt = GgufCheckpoint::open(&model_path()).expect("default model opens");
    DecoderModel::load(&mut ckpt, mode, 4096).expect("default model loads")
}

/// Logits `[prompt.len(), vocab]` at every position of `prompt` (teacher forcing), as
/// `examples/quant_accuracy.rs` computes them: each position is its own one-token chunk in
/// one batch, all sharing one block table, so every row samples.
pub fn prompt_logits(model: &DecoderModel, prompt: &[u32], kv_dtype: KvCacheDtype) -> Vec<f32> {
    const BLOCK_SIZE: usize = 16;
    let c = model.config();
    let blocks = prompt.len().div_ceil(BLOCK_SIZE);
    let mut kv = KvCache::new(
        c.num_layers,
        blocks,
        BLOCK_SIZE,
        c.kv_heads(),
        kv_dtype.resolve(),
    );
    // Block ids are only minted by a block manager.
    let table = BlockManager::new(blocks, BLOCK_SIZE, false)
        .allocate(blocks)
        .expect("a fresh pool has every block");
    let mut batch = ForwardBatch::default();
    for (pos, &tok) in prompt.iter().enumerate() {
        batch.push_seq(&[tok], pos, &table, BLOCK_SIZE, true);
    }
    let logits = model.forward(&batch, &mut kv).expect("forward");
    assert_eq!(logits.len(), prompt.len() * c.vocab_size);
    logits
}

/// Lowest index wins ties, as the engine's greedy sampler does.
pub fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32
}

/// `l − ln Σ eˡ` over the whole row, in f64: the reference normaliser for logprob checks.
pub fn log_softmax_f64(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .map(|&l| l as f64)
        .fold(f64::NEG_INFINITY, f64::max);
    let lse = max
        + logits
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    logits.iter().map(|&l| l as f64 - lse).collect()
}

/// The token a model-free scheduler test "samples" for every chunk that samples: only the
/// bookkeeping is under test, not the values.
pub fn fake_samples(
    out: &tokenmill_engine::sched::scheduler_output::SchedulerOutput,
) -> Vec<(
    tokenmill_engine::SeqId,
    Vec<tokenmill_engine::sample::sampled_token::SampledToken>,
)> {
    out.chunks
        .iter()
        .filter(|c| c.sample)
        .map(|c| {
            let token = tokenmill_engine::sample::sampled_token::SampledToken {
                token_id: 7,
                logprob: None,
                top_logprobs: vec![],
            };
            (c.seq_id, vec![token])
        })
        .collect()
}

/// A test's full name as libtest filters it in this binary, for a test that runs one test of
/// its own binary as a child process: `libtest_name(module_path!(), "f")` is `module::f`
/// (`module_path!()` starts with the binary's crate name, which libtest leaves out).
pub fn libtest_name(module_path: &str, test: &str) -> String {
    let module = module_path.split_once("::").map_or("", |(_, rest)| rest);
    format!("{module}::{test}")
}
