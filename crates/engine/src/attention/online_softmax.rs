//! The portable online-softmax fold, the sequence every build must give: a [`Span`] walks
//! one KV head's positions chunk by chunk (through the block table) for a run of query
//! rows, each chunk folded into every (row, head)'s [`State`] (running max, sum and
//! unnormalised output; [`fold_chunk`]), partitions merged in order ([`merge`]) and
//! normalised at the end. Where the job runs under AVX2 it hands chunks to the `backends`
//! folds instead, which perform the same float operations in the same order.

#[cfg(target_arch = "x86_64")]
use super::backends;
use super::backends::Isa;
use super::exp2::exp2;
use super::lanes::Lanes;
#[cfg(target_arch = "x86_64")]
use super::rows::Direct;
use super::rows::Rows;
use super::{AttentionShape, CHUNK};
use crate::kv::block_table::BlockTable;
use std::ops::Range;

/// Heads of a tile's rows folded in one call where each row sees the whole chunk: four heads'
/// state is what the 512-bit fold keeps in registers, so each key or value it loads serves four
/// heads' multiply-adds. Rows join a call only while all their heads fit (two rows of Qwen3's two
/// heads a KV head; SmolLM2's three-head rows fold one at a time).
#[cfg(target_arch = "x86_64")]
const FOLD_HEADS: usize = 4;

/// Online-softmax state of several (row, head) pairs: running max (base 2), sum, and
/// unnormalised output.
#[derive(Default)]
pub(super) struct State {
    pub(super) max: Vec<f32>,
    pub(super) sum: Vec<f32>,
    pub(super) acc: Vec<f32>,
}

impl State {
    /// Merges head `i` of a finished partition into this running total. Inlined into the
    /// caller's target features: out of line its `mul_add`s were libm `fmaf` calls, 2.6% of
    /// a Qwen3-0.6B prefill (`perf`).
    #[inline(always)]
    pub(super) fn absorb(&mut self, part: &State, i: usize, d: usize) {
        let acc = i * d..(i + 1) * d;
        merge(
            (
                &mut self.max[i],
                &mut self.sum[i],
                &mut self.acc[acc.clone()],
            ),
            (part.max[i], part.sum[i], &part.acc[acc]),
        );
    }

    pub(super) fn reset(&mut self, n: usize, d: usize) {
        self.max.clear();
        self.max.resize(n, f32::NEG_INFINITY);
        self.sum.clear();
        self.sum.resize(n, 0.0);
        self.acc.clear();
        self.acc.resize(n * d, 0.0);
    }
}

/// Per-thread buffers, grown once and reused so steady-state steps do not allocate.
#[derive(Default)]
pub(super) struct Scratch {
    /// One chunk of keys, transposed: `[head_dim, CHUNK]`.
    pub(super) keys_t: Vec<f32>,
    /// One chunk of values: `[CHUNK, head_dim]`.
    pub(super) values: Vec<f32>,
    /// Scaled queries of the tile: `[rows * group, head_dim]`.
    pub(super) queries: Vec<f32>,
    pub(super) partition: State,
    pub(super) total: State,
}

impl Scratch {
    pub(super) fn prepare(&mut self, d: usize, queries: usize) {
        self.keys_t.resize(d * CHUNK, 0.0);
        self.values.resize(CHUNK * d, 0.0);
        self.queries.resize(queries * d, 0.0);
    }
}

/// Walks positions `span` (chunk-aligned) of one KV head for a run of consecutive query
/// rows at `positions`, folding each chunk into `state` for every row that sees it.
pub(super) struct Span<'a, R> {
    pub(super) rows: &'a R,
    pub(super) table: &'a BlockTable,
    pub(super) shape: AttentionShape,
    pub(super) kv_head: usize,
    pub(super) positions: &'a [usize],
    /// Read by the x86 folds only.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) isa: Isa,
}

impl<R: Rows> Span<'_, R> {
    #[inline(always)]
    pub(super) fn fold(
        &self,
        span: Range<usize>,
        queries: &[f32],
        bufs: &mut ChunkBufs,
        state: &mut State,
    ) {
        let d = self.shape.head_dim;
        let g = queries.len() / d / self.positions.len();
        let last = *self.positions.iter().max().expect("a tile has rows");
        let end = span.end.min(last + 1);
        // Chunks before every row's window are skipped (each row skips its own below).
        let first = self
            .positions
            .iter()
            .map(|&p| self.shape.first_visible(p))
            .min()
            .expect("a tile has rows");
        let mut start = span.start.max(first / CHUNK * CHUNK);
        while start < end {
            let n = CHUNK.min(end - start);
            if self.fold_direct(start, queries, state) {
                start += CHUNK;
                continue;
            }
            self.load_chunk(start, n, bufs);
            let mut r = 0;
            while r < self.positions.len() {
                let pos = self.positions[r];
                let Some(lanes) = Lanes::of(start, pos, self.shape.first_visible(pos)) else {
                    r += 1;
                    continue;
                };
                #[cfg(target_arch = "x86_64")]
                if R::AVX2 && d.is_multiple_of(32) {
                    // Rows that all see the whole chunk fold as one run of heads (their
                    // states and queries lie side by side), so a key vector serves more
                    // heads and their softmax steps overlap: on 512-bit registers as many
                    // rows as a batch holds, phase by phase, otherwise a register's worth.
                    let batch = self.isa.batch_heads(d);
                    let most = batch.map_or(FOLD_HEADS, |heads| heads.max(g));
                    let mut n = 1;
                    let sees_whole = |p: usize| {
                        Lanes::of(start, p, self.shape.first_visible(p))
                            .is_some_and(Lanes::is_whole)
                    };
                    while lanes.is_whole()
                        && (n + 1) * g <= most
                        && self.positions.get(r + n).is_some_and(|&p| sees_whole(p))
                    {
                        n += 1;
                    }
                    let chunk = backends::avx2::F32Chunk {
                        keys_t: bufs.keys_t,
                        values: bufs.values,
                    };
                    let heads = backends::avx2::HeadStates {
                        max: &mut state.max[r * g..(r + n) * g],
                        sum: &mut state.sum[r * g..(r + n) * g],
                        acc: &mut state.acc[r * g * d..(r + n) * g * d],
                    };
                    let q = &queries[r * g * d..(r + n) * g * d];
                    // SAFETY: `AVX2` rows are only built when the CPU has AVX2, FMA and F16C;
                    // `isa` is the build's, so `Avx512` only where the CPU has AVX-512.
                    unsafe {
                        let heads_in = n * g;
                        if lanes.is_whole()
                            && heads_in > FOLD_HEADS
                            && batch.is_some_and(|b| heads_in <= b)
                        {
                            self.isa.fold_batch_f32(q, &chunk, d, heads)
                        } else {
                            self.isa.fold_f32(q, &chunk, d, lanes, heads)
                        }
                    };
                    r += n;
                    continue;
                }
                for i in r * g..(r + 1) * g {
                    let pair = PairState {
                        max: &mut state.max[i],
                        sum: &mut state.sum[i],
                        acc: &mut state.acc[i * d..(i + 1) * d],
                    };
                    fold_chunk(&queries[i * d..(i + 1) * d], bufs, lanes, pair);
                }
                r += 1;
            }
            start += CHUNK;
        }
    }

    /// A lone row's chunk folded straight from an f16, `q8_0` or `fp8` cache when the chunk lies
    /// inside one block (AVX2 + F16C only); `false` leaves the chunk to the widened copy.
    /// With one row the copy is used by only the group's few heads, so writing and
    /// re-reading it cost more than widening on the fly (decode attention is most of its
    /// time otherwise).
    #[inline(always)]
    fn fold_direct(&self, start: usize, queries: &[f32], state: &mut State) -> bool {
        #[cfg(target_arch = "x86_64")]
        if let (Some(direct), [pos]) = (self.rows.direct(), self.positions) {
            let d = self.shape.head_dim;
            if !folds_direct(self.shape) {
                return false;
            }
            let Some(lanes) = Lanes::of(start, *pos, self.shape.first_visible(*pos)) else {
                // Before the row's window (the fold starts at its chunk): nothing to add.
                return true;
            };
            let chunk = direct_chunk(direct, self.table, self.shape, self.kv_head, start);
            let g = queries.len() / d;
            let heads = backends::avx2::HeadStates {
                max: &mut state.max[..g],
                sum: &mut state.sum[..g],
                acc: &mut state.acc[..g * d],
            };
            // SAFETY: `direct` is only `Some` where the CPU has AVX2, FMA and F16C; `isa` as
            // in `fold`.
            unsafe { self.isa.fold_direct(queries, &chunk, d, lanes, heads) };
            return true;
        }
        let _ = (start, queries, state);
        false
    }

    /// Keys (transposed) and values of positions `start..start + n`, widened to f32. The
    /// cache keeps keys transposed within each block, so one key element of a block's run
    /// of positions is a single contiguous read.
    #[inline(always)]
    fn load_chunk(&self, start: usize, n: usize, bufs: &mut ChunkBufs) {
        let AttentionShape {
            head_dim: d,
            block_size: bs,
            num_kv_heads,
            ..
        } = self.shape;
        let width = num_kv_heads * d;
        let mut j = 0;
        while j < n {
            let pos = start + j;
            let offset = pos % bs;
            let run = (bs - offset).min(n - j);
            let Some(block) = self.table.get(pos / bs) else {
                // Released (before every row's window): these lanes are masked, their
                // values never read; their keys are zeroed rather than left stale.
                for k in 0..d {
                    bufs.keys_t[k * CHUNK + j..k * CHUNK + j + run].fill(0.0);
                }
                j += run;
                continue;
            };
            let block = block.index();
            let first_key = (block * width + self.kv_head * d) * bs + offset;
            if offset == 0 && bs == CHUNK {
                // A block is a chunk: its `[head_dim][block_size]` keys are already
                // `keys_t`'s layout, one contiguous read instead of `d` short ones. Positions
                // past `n` in a partly filled block are read too; their lanes get weight 0.
                self.rows.key(first_key, &mut bufs.keys_t[..d * CHUNK]);
            } else {
                for k in 0..d {
                    let dst = &mut bufs.keys_t[k * CHUNK + j..k * CHUNK + j + run];
                    self.rows.key(first_key + k * bs, dst);
                }
            }
            for i in 0..run {
                let at = ((block * num_kv_heads + self.kv_head) * bs + offset + i) * d;
                self.rows
                    .value(at, &mut bufs.values[(j + i) * d..(j + i + 1) * d]);
            }
            j += run;
        }
    }
}

/// Whether a lone row's chunks can be folded straight from the cache: each chunk inside
/// one block, and a head dim the direct fold's registers cover.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) fn folds_direct(shape: AttentionShape) -> bool {
    shape.block_size.is_multiple_of(CHUNK) && shape.head_dim.is_multiple_of(32)
}

/// Where the chunk at position `start` of KV head `kv_head` sits in the cache.
#[cfg(target_arch = "x86_64")]
pub(super) fn direct_chunk<'a>(
    direct: Direct<'a>,
    table: &BlockTable,
    shape: AttentionShape,
    kv_head: usize,
    start: usize,
) -> backends::avx2::DirectChunk<'a> {
    let (d, bs) = (shape.head_dim, shape.block_size);
    let width = shape.num_kv_heads * d;
    // A direct fold's chunk lies in one block, the one its first visible lane is in, which
    // no window has passed.
    let block = table
        .get(start / bs)
        .expect("a directly folded chunk's block is held")
        .index();
    let offset = start % bs;
    let first_key = (block * width + kv_head * d) * bs + offset;
    let first_value = ((block * shape.num_kv_heads + kv_head) * bs + offset) * d;
    match direct {
        Direct::F16(keys, values) => backends::avx2::DirectChunk::F16(backends::avx2::F16Chunk {
            keys,
            first_key,
            key_stride: bs,
            values,
            first_value,
            value_stride: d,
            next: None,
        }),
        Direct::Q8(keys, values) => backends::avx2::DirectChunk::Q8(backends::avx2::ScaledChunk {
            keys,
            first_key,
            values,
            first_value,
            value_stride: d,
            next: None,
        }),
        Direct::Fp8(keys, values) => {
            backends::avx2::DirectChunk::Fp8(backends::avx2::ScaledChunk {
                keys,
                first_key,
                values,
                first_value,
                value_stride: d,
                next: None,
            })
        }
    }
}

/// One (row, head)'s online-softmax state.
struct PairState<'a> {
    max: &'a mut f32,
    sum: &'a mut f32,
    acc: &'a mut [f32],
}

pub(super) struct ChunkBufs<'a> {
    pub(super) keys_t: &'a mut [f32],
    pub(super) values: &'a mut [f32],
}

/// Folds one chunk into one (row, head): scores for the positions of `lanes`, a new
/// running max, rescaled sum and accumulator, then the weighted values.
#[inline(always)]
fn fold_chunk(q: &[f32], bufs: &ChunkBufs, lanes: Lanes, state: PairState) {
    let PairState { max, sum, acc } = state;
    let s = chunk_scores(q, bufs.keys_t);
    let chunk_max = s[lanes.first..lanes.end]
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let new_max = max.max(chunk_max);
    let alpha = exp2(*max - new_max);
    let mut p = [0.0f32; CHUNK];
    for j in 0..CHUNK {
        let e = exp2(s[j] - new_max);
        // Lanes outside hold unseen positions' (or stale) keys: weight zero.
        p[j] = if lanes.contains(j) { e } else { 0.0 };
    }
    *sum = sum.mul_add(alpha, lane_sum(&p));
    *max = new_max;
    accumulate(acc, alpha, lanes, &p, bufs.values);
}

/// The chunk's weights summed in a fixed tree (halves, then quarters, then pairs): a
/// left-to-right sum is one chain of dependent adds, ~13% of a prefill's attention time.
/// Lanes a row does not see hold exact zeros, so they add nothing.
#[inline(always)]
fn lane_sum(p: &[f32; CHUNK]) -> f32 {
    const { assert!(CHUNK == 16, "the tree below is written for sixteen lanes") };
    let mut h = [0.0f32; CHUNK / 2];
    for (i, x) in h.iter_mut().enumerate() {
        *x = p[i] + p[i + CHUNK / 2];
    }
    let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

/// Accumulator lanes kept in registers across a chunk's positions.
const ACC_LANES: usize = 64;

/// `acc = acc * alpha + Σ_j p_j v_j`, j in `lanes` in order (values outside are never read). `ACC_LANES` of `acc` stay in registers
/// across the positions (independent FMA chains), the tail takes the same steps one by one.
/// 64 lanes are eight AVX2 chains, enough to cover the FMA latency (fewer leave the loop
/// waiting on it); the lanes do not change any element's order.
#[inline(always)]
fn accumulate(acc: &mut [f32], alpha: f32, lanes: Lanes, p: &[f32; CHUNK], values: &[f32]) {
    let seen = lanes.first..lanes.end;
    let d = acc.len();
    let mut c = 0;
    while c + ACC_LANES <= d {
        let mut a = [0.0f32; ACC_LANES];
        for (x, &y) in a.iter_mut().zip(&acc[c..c + ACC_LANES]) {
            *x = y * alpha;
        }
        for j in seen.clone() {
            let (w, v) = (p[j], &values[j * d + c..j * d + c + ACC_LANES]);
            for (x, &y) in a.iter_mut().zip(v) {
                *x = w.mul_add(y, *x);
            }
        }
        acc[c..c + ACC_LANES].copy_from_slice(&a);
        c += ACC_LANES;
    }
    for (i, x) in acc.iter_mut().enumerate().skip(c) {
        let mut a = *x * alpha;
        for j in seen.clone() {
            a = p[j].mul_add(values[j * d + i], a);
        }
        *x = a;
    }
}

/// `q · k_j` for the chunk's `CHUNK` positions from transposed keys `[d, CHUNK]`: lanes are
/// positions, so no horizontal sums; four partial sums over `d` hide FMA latency.
#[inline(always)]
fn chunk_scores(q: &[f32], keys_t: &[f32]) -> [f32; CHUNK] {
    let mut part = [[0.0f32; CHUNK]; 4];
    let quads = q.chunks_exact(4);
    let rest = quads.remainder();
    let kt_quads = keys_t.chunks_exact(4 * CHUNK);
    let kt_rest = kt_quads.remainder();
    for (qs, kt) in quads.zip(kt_quads) {
        for u in 0..4 {
            let row = &kt[u * CHUNK..(u + 1) * CHUNK];
            for j in 0..CHUNK {
                part[u][j] = qs[u].mul_add(row[j], part[u][j]);
            }
        }
    }
    for (k, &qk) in rest.iter().enumerate() {
        let row = &kt_rest[k * CHUNK..(k + 1) * CHUNK];
        for j in 0..CHUNK {
            part[0][j] = qk.mul_add(row[j], part[0][j]);
        }
    }
    let mut s = [0.0f32; CHUNK];
    for j in 0..CHUNK {
        s[j] = (part[0][j] + part[1][j]) + (part[2][j] + part[3][j]);
    }
    s
}

/// Merges a finished partition's state into the running total of one (row, head).
#[inline(always)]
pub(super) fn merge(total: (&mut f32, &mut f32, &mut [f32]), part: (f32, f32, &[f32])) {
    let (t_max, t_sum, t_acc) = total;
    let (p_max, p_sum, p_acc) = part;
    let new_max = t_max.max(p_max);
    let a = exp2(*t_max - new_max);
    let b = exp2(p_max - new_max);
    *t_sum = t_sum.mul_add(a, p_sum * b);
    for (t, &p) in t_acc.iter_mut().zip(p_acc) {
        *t = t.mul_add(a, p * b);
    }
    *t_max = new_max;
}

/// `acc / sum` into `out`.
#[inline(always)]
pub(super) fn normalise(sum: f32, acc: &[f32], out: &mut [f32]) {
    let inv = 1.0 / sum;
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = a * inv;
    }
}
