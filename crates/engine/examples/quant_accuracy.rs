//! How far the quantized path is from the exact (f32) path on the default model: top-1
//! agreement and mean |Δlogit| at every position of the golden prompts.
//!
//! Usage: `cargo run --release -p tokenmill-engine --example quant_accuracy -- MODEL.gguf GOLDEN.json`
//! (`scripts/fetch-model.sh` prints the model path; the golden file is
//! `../shared/golden/smollm2-golden.json`).
use tokenmill_engine::config::{KvCacheDtype, WeightMode};
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kv::block_manager::BlockManager;
use tokenmill_engine::kv::kv_cache::KvCache;
use tokenmill_engine::models::checkpoint;
use tokenmill_engine::models::DecoderModel;

const BLOCK_SIZE: usize = 16;

/// Logits `[T, vocab]` at every position of `prompt`: each position is its own one-token
/// chunk in one batch, all sharing one block table, so every row samples.
fn all_logits(model: &DecoderModel, prompt: &[u32]) -> Vec<f32> {
    let c = model.config();
    let blocks = prompt.len().div_ceil(BLOCK_SIZE);
    let mut kv = KvCache::new(
        c.num_layers,
        blocks,
        BLOCK_SIZE,
        c.kv_heads(),
        KvCacheDtype::F32,
    );
    // Block ids are only minted by a block manager.
    let table = BlockManager::new(blocks, BLOCK_SIZE, false)
        .allocate(blocks)
        .expect("a fresh pool has every block");
    let mut batch = ForwardBatch::default();
    for (pos, &tok) in prompt.iter().enumerate() {
        batch.push_seq(&[tok], pos, &table, BLOCK_SIZE, true);
    }
    model.forward(&batch, &mut kv).expect("forward")
}

/// The gap between the largest and the second largest value.
fn margin(v: &[f32]) -> f32 {
    let top = argmax(v);
    let second = (0..v.len())
        .filter(|&i| i != top)
        .fold(f32::NEG_INFINITY, |m, i| m.max(v[i]));
    v[top] - second
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (model_path, golden_path) = (&args[1], &args[2]);
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(golden_path).expect("golden file"))
            .expect("golden json");
    let load = |mode| {
        let mut ckpt = checkpoint::open(model_path.as_ref()).expect("model opens");
        DecoderModel::load(ckpt.as_mut(), mode, 4096).expect("model loads")
    };
    let (exact, quant) = (load(WeightMode::F32), load(WeightMode::Quantized));
    let vocab = exact.config().vocab_size;
    let (mut positions, mut agree, mut golden_agree, mut abs_sum) = (0usize, 0usize, 0usize, 0f64);
    let mut flip_margins = Vec::new();
    for case in golden["cases"].as_array().expect("cases") {
        let prompt: Vec<u32> = case["prompt_ids"]
            .as_array()
            .expect("prompt_ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let (e, q) = (all_logits(&exact, &prompt), all_logits(&quant, &prompt));
        for (p, (er, qr)) in e.chunks_exact(vocab).zip(q.chunks_exact(vocab)).enumerate() {
            positions += 1;
            if argmax(er) == argmax(qr) {
                agree += 1;
            } else {
                flip_margins.push(margin(er));
            }
            golden_agree += (case["prompt_argmax"][p].as_u64() == Some(argmax(qr) as u64)) as usize;
            abs_sum += er
                .iter()
                .zip(qr)
                .map(|(a, b)| (a - b).abs() as f64)
                .sum::<f64>()
                / vocab as f64;
        }
    }
    println!("positions: {positions}");
    println!(
        "top-1 agreement with the f32 path: {:.4}",
        agree as f64 / positions as f64
    );
    // A flip at a near-tie is rounding; one past the logit error would be a broken kernel.
    flip_margins.sort_by(f32::total_cmp);
    println!(
        "f32 path's top-1/top-2 margins where the quantized top-1 differs: {flip_margins:.3?}"
    );
    println!(
        "top-1 agreement with the golden argmax: {:.4}",
        golden_agree as f64 / positions as f64
    );
    println!(
        "mean |Δlogit| vs the f32 path: {:.4}",
        abs_sum / positions as f64
    );
}
