//! The attention kernel on random shapes against a plain f64 softmax, and its batch
//! invariance: a row's output has the same bits however the batch around it is cut. Half
//! the random shapes are sliding-window layers (a row sees the last `window` positions),
//! with windows that start mid-chunk, on a chunk edge, and across partitions.
//!
//! Tolerance: the reference reads the very K/V values the cache stores (already rounded or
//! quantized to its type), so what remains is f32 accumulation and the polynomial `exp2` (relative error
//! < 3e-7): with inputs in [-1, 1] outputs agree to `TOL` absolute.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokenmill_engine::attention::{
    exp2, paged_attention, paged_attention_into, paged_attention_with, AttentionShape, PARTITION,
};
use tokenmill_engine::config::model_config::KvHeads;
use tokenmill_engine::config::{KvCacheDtype, SlidingWindow};
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
use tokenmill_engine::kv::block_manager::{BlockId, BlockManager};
use tokenmill_engine::kv::block_table::BlockTable;
use tokenmill_engine::kv::kv_cache::KvCache;

const TOL: f64 = 2e-6;
const DTYPES: [KvCacheDtype; 5] = [
    KvCacheDtype::F32,
    KvCacheDtype::F16,
    KvCacheDtype::Bf16,
    KvCacheDtype::Q8_0,
    KvCacheDtype::Fp8,
];

/// One sequence of a case: its whole context is in the cache; the batch computes rows
/// `start..start + rows` (a prefill chunk, or one decode row).
struct SeqSpec {
    start: usize,
    rows: usize,
}

struct Case {
    shape: AttentionShape,
    seqs: Vec<SeqSpec>,
    tables: Vec<Vec<BlockId>>,
    kv: KvCache,
    /// `[seq][pos]` → the cached K and V rows (`[kv_width]` each) widened back to f32.
    cached: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
}

impl Case {
    /// Writes random K/V for every sequence's positions `0..start + rows` through
    /// shuffled block tables, so logically adjacent blocks are physically scattered.
    fn new(
        shape: AttentionShape,
        seqs: Vec<SeqSpec>,
        dtype: KvCacheDtype,
        rng: &mut StdRng,
    ) -> Self {
        let bs = shape.block_size;
        let width = shape.num_kv_heads * shape.head_dim;
        let blocks: Vec<usize> = seqs
            .iter()
            .map(|s| (s.start + s.rows).div_ceil(bs))
            .collect();
        let total: usize = blocks.iter().sum();
        let mut ids = BlockManager::new(total, bs, false).allocate(total).unwrap();
        ids.shuffle(rng);
        let heads = KvHeads {
            num_kv_heads: shape.num_kv_heads,
            head_dim: shape.head_dim,
        };
        let mut kv = KvCache::new(1, total, bs, heads, dtype);
        let mut tables = Vec::new();
        let mut cached = Vec::new();
        for (spec, n) in seqs.iter().zip(blocks) {
            let table: Vec<BlockId> = ids.drain(..n).collect();
            let len = spec.start + spec.rows;
            let slots: Vec<usize> = (0..len)
                .map(|p| table[p / bs].index() * bs + p % bs)
                .collect();
            let k = random(rng, len * width);
            let v = random(rng, len * width);
            kv.write(0, &slots, &k, &v);
            let layer = kv.layer(0);
            let rows = slots
                .iter()
                .map(|&s| {
                    let (mut kr, mut vr) = (vec![0.0; width], vec![0.0; width]);
                    layer.key_row(s, &mut kr);
                    layer.value_row(s, &mut vr);
                    (kr, vr)
                })
                .collect();
            cached.push(rows);
            tables.push(table);
        }
        Self {
            shape,
            seqs,
            tables,
            kv,
            cached,
        }
    }

    /// The batch computing every sequence's rows, each sequence cut into chunks of `cut`
    /// rows laid out as separate entries (as the scheduler does across steps).
    fn batch(&self, cut: usize) -> ForwardBatch {
        let mut batch = ForwardBatch::default();
        for (spec, table) in self.seqs.iter().zip(&self.tables) {
            let mut start = spec.start;
            while start < spec.start + spec.rows {
                let n = cut.min(spec.start + spec.rows - start);
                batch.push_seq(&vec![0; n], start, table, self.shape.block_size, false);
                start += n;
            }
        }
        batch
    }

    fn q_width(&self) -> usize {
        self.shape.num_heads * self.shape.head_dim
    }

    /// Softmax(q·k/√d)·v in f64 for sequence `s`'s row at position `pos`, over the
    /// positions its window sees.
    fn reference(&self, s: usize, pos: usize, q: &[f32]) -> Vec<f64> {
        let AttentionShape {
            num_heads,
            num_kv_heads,
            head_dim: d,
            ..
        } = self.shape;
        let group = num_heads / num_kv_heads;
        let mut out = vec![0.0f64; num_heads * d];
        let first = self
            .shape
            .window
            .map_or(0, |w| (pos + 1).saturating_sub(w.get()));
        for h in 0..num_heads {
            let kvh = h / group;
            let qh = &q[h * d..(h + 1) * d];
            let scores: Vec<f64> = (first..=pos)
                .map(|j| {
                    let k = &self.cached[s][j].0[kvh * d..(kvh + 1) * d];
                    let dot: f64 = qh.iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum();
                    dot / (d as f64).sqrt()
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for (j, w) in (first..=pos).zip(&weights) {
                let v = &self.cached[s][j].1[kvh * d..(kvh + 1) * d];
                for (o, x) in out[h * d..(h + 1) * d].iter_mut().zip(v) {
                    *o += w / total * *x as f64;
                }
            }
        }
        out
    }
}

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// A random shape and mix of sequences: GQA groups 1–4, odd head sizes, blocks of 1–32,
/// prefill chunks that start mid-context, and lone decode rows whose context crosses
/// several flash-decoding partitions.
fn random_case(rng: &mut StdRng, dtype: KvCacheDtype) -> Case {
    let head_dim = [6, 16, 36, 64, 128][rng.random_range(0..5)];
    random_case_with(rng, dtype, head_dim_for(dtype, head_dim))
}

/// `head_dim`, or for a block-quantized cache (whose head dim is a multiple of its block)
/// the nearest multiple of the block at or above it.
fn head_dim_for(dtype: KvCacheDtype, head_dim: usize) -> usize {
    dtype
        .block_values()
        .map_or(head_dim, |b| head_dim.next_multiple_of(b))
}

/// Global attention half the time, else a window: one position, under a chunk, a chunk
/// and one past it, across chunks, and just under and over a partition.
fn random_window(rng: &mut StdRng) -> Option<SlidingWindow> {
    let sizes = [1, 7, 16, 17, 40, PARTITION - 7, PARTITION + 33];
    rng.random_bool(0.5)
        .then(|| SlidingWindow::new(sizes[rng.random_range(0..sizes.len())]).unwrap())
}

/// [`random_case`] with a chosen head size.
fn random_case_with(rng: &mut StdRng, dtype: KvCacheDtype, head_dim: usize) -> Case {
    let num_kv_heads = rng.random_range(1..=3);
    let shape = AttentionShape {
        num_kv_heads,
        num_heads: num_kv_heads * rng.random_range(1..=4),
        head_dim,
        block_size: [1, 5, 16, 32][rng.random_range(0..4)],
        window: random_window(rng),
        kv_group: 0,
    };
    let seqs = (0..rng.random_range(1..=4))
        .map(|_| match rng.random_range(0..3) {
            0 => SeqSpec {
                start: 0,
                rows: rng.random_range(1..80),
            },
            1 => SeqSpec {
                start: rng.random_range(1..2 * PARTITION),
                rows: rng.random_range(1..48),
            },
            _ => SeqSpec {
                start: rng.random_range(0..3 * PARTITION),
                rows: 1,
            },
        })
        .collect();
    Case::new(shape, seqs, dtype, rng)
}

#[test]
fn attention_matches_an_f64_softmax_for_random_shapes_and_every_cache_type() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut worst = 0.0f64;
    for round in 0..32 {
        let dtype = DTYPES[round % DTYPES.len()];
        let case = random_case(&mut rng, dtype);
        let batch = case.batch(usize::MAX);
        let w = case.q_width();
        let q = random(&mut rng, batch.num_tokens() * w);
        let out = paged_attention(&q, case.kv.layer(0), &batch, case.shape);
        for row in 0..batch.num_tokens() {
            let s = batch.seq_index[row];
            let reference = case.reference(s, batch.positions[row], &q[row * w..(row + 1) * w]);
            for (i, (a, b)) in out[row * w..(row + 1) * w]
                .iter()
                .zip(&reference)
                .enumerate()
            {
                let err = (*a as f64 - b).abs();
                worst = worst.max(err);
                assert!(
                    err < TOL,
                    "round {round} ({dtype:?}, {:?}): row {row} at position {} element {i}: {a} vs {b}",
                    case.shape,
                    batch.positions[row]
                );
            }
        }
    }
    eprintln!("worst absolute error against f64: {worst:.2e} (tolerance {TOL:.0e})");
}

/// Output rows of `batch` keyed by (sequence, position), for comparing batches cut
/// differently.
fn by_position(case: &Case, batch: &ForwardBatch, out: &[f32]) -> Vec<Vec<u32>> {
    let w = case.q_width();
    let mut rows: Vec<(usize, usize, Vec<u32>)> = (0..batch.num_tokens())
        .map(|r| {
            let seq = seq_of(case, batch, r);
            let bits = out[r * w..(r + 1) * w]
                .iter()
                .map(|x| x.to_bits())
                .collect();
            (seq, batch.positions[r], bits)
        })
        .collect();
    rows.sort_by_key(|(s, p, _)| (*s, *p));
    rows.into_iter().map(|(_, _, bits)| bits).collect()
}

/// The case's sequence a batch row belongs to (entries of one sequence share its table).
fn seq_of(case: &Case, batch: &ForwardBatch, row: usize) -> usize {
    let table = batch.seqs[batch.seq_index[row]].block_tables[0].held();
    case.tables.iter().position(|t| t == table).unwrap()
}

#[test]
fn a_rows_output_has_the_same_bits_however_the_batch_is_cut() {
    let mut rng = StdRng::seed_from_u64(12);
    for round in 0..12 {
        let dtype = DTYPES[round % DTYPES.len()];
        let mut case = random_case(&mut rng, dtype);
        // One long prefill chunk too, so tiles cross partition boundaries.
        if round % 4 == 0 {
            case = Case::new(
                case.shape,
                vec![SeqSpec {
                    start: PARTITION - 20,
                    rows: 70,
                }],
                dtype,
                &mut rng,
            );
        }
        let q_of = |case: &Case, rng: &mut StdRng| -> Vec<Vec<f32>> {
            case.seqs
                .iter()
                .map(|s| random(rng, (s.start + s.rows) * case.q_width()))
                .collect()
        };
        let qs = q_of(&case, &mut rng);
        let run = |cut: usize| {
            let batch = case.batch(cut);
            let w = case.q_width();
            let mut q = Vec::new();
            for r in 0..batch.num_tokens() {
                let (s, p) = (seq_of(&case, &batch, r), batch.positions[r]);
                q.extend_from_slice(&qs[s][p * w..(p + 1) * w]);
            }
            let mut out = vec![f32::NAN; q.len()];
            paged_attention_into(&q, case.kv.layer(0), &batch, case.shape, &mut out);
            by_position(&case, &batch, &out)
        };
        // Whole chunks, chunks of 7 and 3, and every row alone (each a lone decode row).
        let whole = run(usize::MAX);
        for cut in [7, 3, 1] {
            assert!(
                whole == run(cut),
                "round {round} ({dtype:?}, {:?}): cutting into {cut}-row chunks changed bits",
                case.shape
            );
        }
    }
}

#[test]
fn every_kernel_this_cpu_runs_gives_the_portable_kernels_bits() {
    let mut rng = StdRng::seed_from_u64(13);
    // Head sizes that are multiples of 32 take the AVX2 build's vector fold (one to four
    // heads per group: its one-, two- and three-head register tiles), multiples of 64 the
    // AVX-512 build's 512-bit fold (its one- to four-head tiles); the others their compiled
    // copy of the portable fold.
    let kernels = CpuKernel::supported();
    eprintln!("kernels: {kernels:?}");
    // Every dtype meets every head size.
    for round in 0..8 * DTYPES.len() {
        let dtype = DTYPES[round % DTYPES.len()];
        let head_dim = [64, 128, 32, 96, 6, 16, 36, 192][(round / DTYPES.len()) % 8];
        let case = random_case_with(&mut rng, dtype, head_dim_for(dtype, head_dim));
        let batch = case.batch(usize::MAX);
        let q = random(&mut rng, batch.num_tokens() * case.q_width());
        let (kv, shape) = (case.kv.layer(0), case.shape);
        let portable = paged_attention_with(CpuKernel::Portable, &q, kv, &batch, shape);
        for &kernel in &kernels {
            let fast = paged_attention_with(kernel, &q, kv, &batch, shape);
            let same = fast
                .iter()
                .zip(&portable)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "round {round} ({dtype:?}, {shape:?}): {kernel} differs"
            );
        }
    }
}

#[test]
fn exp2_is_within_3e_7_relative_and_exact_at_the_ends() {
    assert_eq!(exp2(0.0), 1.0);
    assert_eq!(exp2(-1.0), 0.5);
    assert_eq!(exp2(-126.5), 0.0);
    assert_eq!(exp2(f32::NEG_INFINITY), 0.0);
    let mut worst = 0.0f64;
    for i in 0..=1_260_000 {
        let x = -(i as f32) * 1e-4;
        let want = (x as f64).exp2();
        let rel = ((exp2(x) as f64 - want) / want).abs();
        worst = worst.max(rel);
    }
    eprintln!("exp2 worst relative error {worst:.2e}");
    assert!(worst < 3e-7, "exp2 relative error {worst}");
}

#[test]
fn half_caches_store_what_half_rounds_to_nearest_even() {
    let width = 8;
    let values: Vec<f32> = [
        1.0,
        -0.0,
        1.0 + 1.0 / 2048.0, // halfway between two f16 values: rounds to the even one
        65504.0,
        70000.0,     // beyond f16: infinity
        1e-6,        // f16 subnormal
        3.333_333_3, // inexact in both half types
        -2.7182817e-3,
    ]
    .to_vec();
    for dtype in [KvCacheDtype::F16, KvCacheDtype::Bf16, KvCacheDtype::F32] {
        let heads = KvHeads {
            num_kv_heads: 2,
            head_dim: width / 2,
        };
        let mut kv = KvCache::new(1, 2, 2, heads, dtype);
        kv.write(0, &[3], &values, &values);
        let mut back = vec![0.0; width];
        kv.layer(0).key_row(3, &mut back);
        for (x, got) in values.iter().zip(&back) {
            let want = match dtype {
                KvCacheDtype::F16 => half::f16::from_f32(*x).to_f32(),
                KvCacheDtype::Bf16 => half::bf16::from_f32(*x).to_f32(),
                _ => *x,
            };
            assert_eq!(got.to_bits(), want.to_bits(), "{dtype:?}: {x}");
        }
    }
    assert_eq!(
        half::f16::from_f32(1.0 + 1.0 / 2048.0).to_f32(),
        1.0,
        "the tie case is a tie"
    );
}

#[test]
fn a_lone_decode_row_folded_straight_from_the_f16_cache_gives_the_tile_and_portable_bits() {
    lone_rows_give_the_tile_and_portable_bits(KvCacheDtype::F16);
}

#[test]
fn a_lone_decode_row_folded_straight_from_the_q8_0_cache_gives_the_tile_and_portable_bits() {
    lone_rows_give_the_tile_and_portable_bits(KvCacheDtype::Q8_0);
}

#[test]
fn a_lone_decode_row_folded_straight_from_the_fp8_cache_gives_the_tile_and_portable_bits() {
    lone_rows_give_the_tile_and_portable_bits(KvCacheDtype::Fp8);
}

fn lone_rows_give_the_tile_and_portable_bits(dtype: KvCacheDtype) {
    // Head sizes that are multiples of 32 and blocks of whole chunks take the AVX2 build's
    // direct f16 fold for lone rows (where the CPU has F16C), multiples of 64 the AVX-512
    // build's; every group size from one to seven covers their register tiles (one to
    // three heads, one to four).
    let mut rng = StdRng::seed_from_u64(14);
    for round in 0..21 {
        let num_kv_heads = 1 + round % 3;
        let shape = AttentionShape {
            num_kv_heads,
            num_heads: num_kv_heads * (1 + round % 7),
            head_dim: [32, 64, 128][round % 3],
            block_size: [16, 32, 64][(round / 3) % 3],
            // Every other round a window, which a lone row's direct fold must cut alike.
            window: [None, SlidingWindow::new(8 + 37 * round)][round % 2],
            kv_group: 0,
        };
        // Decode rows at short, partition-crossing and long contexts, and a prefill chunk
        // whose rows, cut one by one, become lone rows too.
        let seqs = vec![
            SeqSpec {
                start: rng.random_range(0..40),
                rows: 1,
            },
            SeqSpec {
                start: rng.random_range(PARTITION - 20..PARTITION + 20),
                rows: 1,
            },
            SeqSpec {
                start: rng.random_range(2 * PARTITION..3 * PARTITION),
                rows: 1,
            },
            SeqSpec {
                start: rng.random_range(0..PARTITION),
                rows: 37,
            },
        ];
        let case = Case::new(shape, seqs, dtype, &mut rng);
        let w = case.q_width();
        let qs: Vec<Vec<f32>> = case
            .seqs
            .iter()
            .map(|s| random(&mut rng, (s.start + s.rows) * w))
            .collect();
        let run = |cut: usize, kernel: CpuKernel| {
            let batch = case.batch(cut);
            let mut q = Vec::new();
            for r in 0..batch.num_tokens() {
                let (s, p) = (seq_of(&case, &batch, r), batch.positions[r]);
                q.extend_from_slice(&qs[s][p * w..(p + 1) * w]);
            }
            let out = paged_attention_with(kernel, &q, case.kv.layer(0), &batch, shape);
            by_position(&case, &batch, &out)
        };
        let portable = run(1, CpuKernel::Portable);
        for kernel in CpuKernel::supported() {
            assert!(
                run(1, kernel) == portable,
                "round {round} ({shape:?}): {kernel}'s lone rows differ from portable"
            );
            assert!(
                run(usize::MAX, kernel) == portable,
                "round {round} ({shape:?}): {kernel}'s tiles differ from portable's lone rows"
            );
        }
    }
}

/// A sliding layer's blocks before the window of a chunk's first row are released once the
/// sequence is past them: through a table that no longer holds them, every row (on every
/// kernel build this CPU runs) has the same bits as through the whole table.
#[test]
fn a_sliding_row_has_the_same_bits_with_the_blocks_before_its_window_released() {
    let mut rng = StdRng::seed_from_u64(15);
    let mut dropped_any = false;
    for round in 0..8 * DTYPES.len() {
        let dtype = DTYPES[round % DTYPES.len()];
        let head_dim = head_dim_for(dtype, [32, 64, 8][round % 3]);
        let mut case = random_case_with(&mut rng, dtype, head_dim);
        case.shape.window = SlidingWindow::new(rng.random_range(1..3 * PARTITION / 2));
        // Every block size meets every dtype (`round % DTYPES.len()` is the dtype).
        case.shape.block_size = [16, 32, 5, 1][(round / DTYPES.len()) % 4];
        let case = Case::new(case.shape, case.seqs, dtype, &mut rng);
        let bs = case.shape.block_size;
        let window = case.shape.window.expect("a sliding layer");
        let whole = case.batch(usize::MAX);
        let mut released = ForwardBatch::default();
        for (spec, table) in case.seqs.iter().zip(&case.tables) {
            let first = window.first_visible(spec.start) / bs;
            dropped_any |= first > 0;
            let table = BlockTable::after_dropped(first, table[first..].to_vec());
            released.push_chunk(&vec![0; spec.rows], spec.start, &[table], bs, false);
        }
        let q = random(&mut rng, whole.num_tokens() * case.q_width());
        for kernel in CpuKernel::supported() {
            let a = paged_attention_with(kernel, &q, case.kv.layer(0), &whole, case.shape);
            let b = paged_attention_with(kernel, &q, case.kv.layer(0), &released, case.shape);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&a),
                bits(&b),
                "round {round} ({dtype:?}, {kernel}): {:?}",
                case.shape
            );
        }
    }
    assert!(dropped_any, "some case should release blocks");
}
