//! Times the paged attention kernel alone on SmolLM2's and Qwen3's head shapes: a prefill
//! chunk at several context lengths and decode rows, best of many repetitions (the minimum
//! filters out what other tenants of the machine take), in GFLOP/s of its multiply-adds.
//!
//! `cargo run --release -p tokenmill-engine --example attention_bench [-- --reps N] [--rows R] [--seqs S] [--cold] [--dtype D]`
//! (`--rows 1`: only the decode cases, `--seqs 64` only those of 64 sequences, e.g. under
//! `perf record`; `--cold`: the caches flushed before each repetition, as a decode step
//! finds them; `--dtype`: the KV cache's, as `--kv-cache-dtype` spells it, default f16).
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;
use tokenmill_engine::attention::{paged_attention_into, AttentionShape};
use tokenmill_engine::config::model_config::KvHeads;
use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kernels::compute_pool::ComputePool;
use tokenmill_engine::kv::block_manager::{BlockId, BlockManager};
use tokenmill_engine::kv::kv_cache::KvCache;

/// A named head shape: query heads, KV heads, head dim.
const SHAPES: [(&str, usize, usize, usize); 2] = [("smollm2", 9, 3, 64), ("qwen3", 16, 8, 128)];
const BLOCK: usize = 16;

/// One case: `seqs` sequences each computing `rows` rows that end at context `context`.
struct Case {
    seqs: usize,
    rows: usize,
    context: usize,
}

fn main() {
    let reps = std::env::args()
        .skip_while(|a| a != "--reps")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5usize);
    let only_rows: Option<usize> = std::env::args()
        .skip_while(|a| a != "--rows")
        .nth(1)
        .and_then(|n| n.parse().ok());
    let only_seqs: Option<usize> = std::env::args()
        .skip_while(|a| a != "--seqs")
        .nth(1)
        .and_then(|n| n.parse().ok());
    let cold = std::env::args().any(|a| a == "--cold");
    let dtype: KvCacheDtype = std::env::args()
        .skip_while(|a| a != "--dtype")
        .nth(1)
        .map_or(Ok(KvCacheDtype::F16), |d| d.parse())
        .unwrap_or_else(|e| panic!("--dtype: {e}"));
    let flush: Vec<u8> = (0..64usize << 20).map(|i| i as u8).collect();
    let cases = [
        Case {
            seqs: 1,
            rows: 512,
            context: 512,
        },
        Case {
            seqs: 1,
            rows: 512,
            context: 2048,
        },
        Case {
            seqs: 4,
            rows: 128,
            context: 128,
        },
        Case {
            seqs: 1,
            rows: 1,
            context: 256,
        },
        Case {
            seqs: 1,
            rows: 1,
            context: 1024,
        },
        Case {
            seqs: 1,
            rows: 1,
            context: 4096,
        },
        Case {
            seqs: 1,
            rows: 1,
            context: 160,
        },
        Case {
            seqs: 16,
            rows: 1,
            context: 160,
        },
        Case {
            seqs: 64,
            rows: 1,
            context: 192,
        },
    ];
    let mut rng = StdRng::seed_from_u64(7);
    for (name, heads, kv_heads, d) in SHAPES {
        let shape = AttentionShape {
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim: d,
            block_size: BLOCK,
            window: None,
            kv_group: 0,
        };
        for case in cases
            .iter()
            .filter(|c| only_rows.is_none_or(|r| r == c.rows))
            .filter(|c| only_seqs.is_none_or(|n| n == c.seqs))
        {
            let (kv, batch) = setup(shape, case, dtype, &mut rng);
            let q: Vec<f32> = (0..batch.num_tokens() * heads * d)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let mut out = vec![0.0f32; q.len()];
            // Timed on a pool worker, as the forward pass calls it: from outside the pool
            // every call would add a hand-off, which a decode row's few microseconds cannot hide.
            let best = rayon::scope(|_| {
                let mut best = f64::INFINITY;
                for _ in 0..reps {
                    if cold {
                        // What a forward pass leaves in the caches: another layer's
                        // weights and cache rows, not this layer's.
                        // On the compute pool, so its helpers are awake (spinning) when
                        // the attention starts, as between a forward pass's loops.
                        let half = flush.len() / 2;
                        ComputePool::global().run(2, &|i| {
                            let part = &flush[i * half..(i + 1) * half];
                            let sum = part.chunks_exact(64).fold(0u8, |a, c| a ^ c[0]);
                            std::hint::black_box(sum);
                        });
                    }
                    let t = Instant::now();
                    paged_attention_into(&q, kv.layer(0), &batch, shape, &mut out);
                    best = best.min(t.elapsed().as_secs_f64());
                }
                best
            });
            // Attended positions × heads × d × 2 (scores and values) multiply-adds.
            let first = case.context - case.rows;
            let attended: usize = (first..case.context).map(|p| p + 1).sum::<usize>() * case.seqs;
            let flops = 4.0 * (attended * heads * d) as f64;
            println!(
                "{name:8} {:>2} seq × {:>3} rows to context {:>4}: {:>8.3} ms, {:>6.1} GFLOP/s",
                case.seqs,
                case.rows,
                case.context,
                best * 1e3,
                flops / best / 1e9
            );
        }
    }
}

/// A one-layer cache of `dtype` holding random K/V for every sequence's context, and the
/// batch.
fn setup(
    shape: AttentionShape,
    case: &Case,
    dtype: KvCacheDtype,
    rng: &mut StdRng,
) -> (KvCache, ForwardBatch) {
    let width = shape.num_kv_heads * shape.head_dim;
    let per_seq = case.context.div_ceil(BLOCK);
    let total = per_seq * case.seqs;
    let ids = BlockManager::new(total, BLOCK, false)
        .allocate(total)
        .expect("a fresh pool holds every block");
    let heads = KvHeads {
        num_kv_heads: shape.num_kv_heads,
        head_dim: shape.head_dim,
    };
    let mut kv = KvCache::new(1, total, BLOCK, heads, dtype);
    let mut batch = ForwardBatch::default();
    for table in ids.chunks(per_seq) {
        let table: Vec<BlockId> = table.to_vec();
        let slots: Vec<usize> = (0..case.context)
            .map(|p| table[p / BLOCK].index() * BLOCK + p % BLOCK)
            .collect();
        let mut random =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
        let (k, v) = (random(case.context * width), random(case.context * width));
        kv.write(0, &slots, &k, &v);
        let start = case.context - case.rows;
        batch.push_seq(&vec![0; case.rows], start, &table, BLOCK, false);
    }
    (kv, batch)
}
