//! What verifying drafts costs: the forward pass of one sequence's chunk of 1 + k tokens
//! (every row's logits computed, as a verify does) against a plain one-token decode, at a
//! given context length. The ratio is what speculative decoding's acceptance must beat.
//!
//! Usage: `cargo run --release -p tokenmill-engine --example verify_cost -- [MODEL] [CONTEXT]`
//! (default: the cached default model, context 256). Prints, per k, the median time of
//! 200 passes and its ratio to k = 0.
use std::time::Instant;
use tokenmill_engine::config::{KvCacheDtype, WeightMode};
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kv::block_manager::BlockManager;
use tokenmill_engine::kv::kv_cache::KvCache;
use tokenmill_engine::models::checkpoint::{self, default_model_path};
use tokenmill_engine::models::DecoderModel;

const BLOCK_SIZE: usize = 16;
const PASSES: usize = 200;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(default_model_path);
    let context: usize = args
        .get(2)
        .map_or(256, |c| c.parse().expect("a context length"));
    let mut ckpt = checkpoint::open(&path).expect("model opens");
    let model =
        DecoderModel::load(ckpt.as_mut(), WeightMode::Quantized, 4096).expect("model loads");
    let c = model.config().clone();
    let blocks = (context + 64).div_ceil(BLOCK_SIZE);
    let mut kv = KvCache::new(
        c.num_layers,
        blocks,
        BLOCK_SIZE,
        c.kv_heads(),
        KvCacheDtype::Auto.resolve(),
    );
    let table = BlockManager::new(blocks, BLOCK_SIZE, false)
        .allocate(blocks)
        .expect("a fresh pool has every block");
    let token = |i: usize| ((i * 7919 + 13) % c.vocab_size) as u32;
    // The context, prefilled once; each timed pass then rewrites positions from `context` on.
    let mut prefill = ForwardBatch::default();
    let prompt: Vec<u32> = (0..context).map(token).collect();
    prefill.push_seq(&prompt, 0, &table, BLOCK_SIZE, true);
    model.reserve(context.max(64), 64);
    model.forward(&prefill, &mut kv).expect("prefill");
    println!("context {context}, {PASSES} passes each; median forward time");
    let mut base = None;
    for k in [0usize, 1, 2, 3, 4, 6, 8] {
        let chunk: Vec<u32> = (context..context + 1 + k).map(token).collect();
        let mut batch = ForwardBatch::default();
        batch.push_seq(&chunk, context, &table, BLOCK_SIZE, true);
        batch.verify_drafts(k);
        // One logits buffer for every pass, as the engine's runner keeps one.
        let mut logits = Vec::new();
        let mut times: Vec<f64> = (0..PASSES)
            .map(|_| {
                let t = Instant::now();
                model
                    .forward_into(&batch, &mut kv, &mut logits)
                    .expect("forward");
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let median = times[PASSES / 2];
        let base = *base.get_or_insert(median);
        println!(
            "k = {k}: {:.3} ms ({:.2}x a decode; {:.3} ms per extra row)",
            median * 1e3,
            median / base,
            if k == 0 {
                0.0
            } else {
                (median - base) * 1e3 / k as f64
            }
        );
    }
}
