//! The units of work a plan's tasks become ([`TileJob`], [`PartitionJob`], [`MergeJob`]),
//! and [`dispatch`], which compiles each once per cache dtype and instruction set
//! (`Job::run` is generic over [`Rows`]; `run_avx2`/`run_avx512` give it their target
//! features) and runs it with this thread's scratch.

#[cfg(target_arch = "x86_64")]
use super::backends;
use super::backends::Isa;
#[cfg(target_arch = "x86_64")]
use super::lanes::Lanes;
#[cfg(target_arch = "x86_64")]
use super::online_softmax::{direct_chunk, folds_direct};
use super::online_softmax::{merge, normalise, ChunkBufs, Scratch, Span};
use super::plan::Ctx;
#[cfg(target_arch = "x86_64")]
use super::rows::Direct;
use super::rows::{Bf16Rows, DirectCode, F16Rows, F32Rows, Rows, ScaledRows};
#[cfg(target_arch = "x86_64")]
use super::CHUNK;
use super::PARTITION;
use crate::kv::block_table::BlockTable;
use crate::kv::kv_cache::{KvLayer, KvSlab};
use crate::kv::scaled_slab::ScaledSlab;
use std::cell::RefCell;
use std::ops::Range;

/// A unit of work, generic over how K/V rows are read so each cache type and ISA gets its
/// own compiled copy.
pub(super) trait Job {
    fn run<R: Rows>(self, rows: &R, scratch: &mut Scratch);
}

/// Runs `job` with this thread's scratch. The scratch is borrowed here, outside the
/// kernel: borrowed inside, the job's body sat in a closure of `LocalKey::with_borrow_mut`
/// that the compiler did not always inline into `run_avx2`, and so compiled it without
/// AVX2 and FMA (the f32 cache's attention called `fmaf` per element, ~60% of a prefill).
pub(super) fn dispatch<J: Job>(isa: Isa, kv: &KvLayer, job: J) {
    SCRATCH.with_borrow_mut(|scratch| match (&kv.keys, &kv.values) {
        (KvSlab::F32(keys), KvSlab::F32(values)) => match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => {
                with_isa(isa, job, &F32Rows::<true> { keys, values }, scratch)
            }
            Isa::Portable => with_isa(isa, job, &F32Rows::<false> { keys, values }, scratch),
        },
        (KvSlab::F16(keys), KvSlab::F16(values)) => match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => {
                with_isa(isa, job, &F16Rows::<true> { keys, values }, scratch)
            }
            Isa::Portable => with_isa(isa, job, &F16Rows::<false> { keys, values }, scratch),
        },
        (KvSlab::Bf16(keys), KvSlab::Bf16(values)) => match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => {
                with_isa(isa, job, &Bf16Rows::<true> { keys, values }, scratch)
            }
            Isa::Portable => with_isa(isa, job, &Bf16Rows::<false> { keys, values }, scratch),
        },
        (KvSlab::Q8(keys), KvSlab::Q8(values)) => with_scaled(isa, job, keys, values, scratch),
        (KvSlab::Fp8(keys), KvSlab::Fp8(values)) => with_scaled(isa, job, keys, values, scratch),
        _ => unreachable!("keys and values share one dtype"),
    })
}

/// [`with_isa`] over a quantized cache's rows.
fn with_scaled<J: Job, Q: DirectCode>(
    isa: Isa,
    job: J,
    keys: &ScaledSlab<Q>,
    values: &ScaledSlab<Q>,
    scratch: &mut Scratch,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => {
            with_isa(isa, job, &ScaledRows::<Q, true> { keys, values }, scratch)
        }
        Isa::Portable => with_isa(isa, job, &ScaledRows::<Q, false> { keys, values }, scratch),
    }
}

fn with_isa<J: Job, R: Rows>(isa: Isa, job: J, rows: &R, scratch: &mut Scratch) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2, FMA and F16C.
        Isa::Avx2 => unsafe { run_avx2(job, rows, scratch) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only chosen when the CPU has AVX-512F/BW/VL too.
        Isa::Avx512 => unsafe { run_avx512(job, rows, scratch) },
        Isa::Portable => job.run(rows, scratch),
    }
}

/// The same code as the portable build, compiled with 256-bit vectors and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_avx2<J: Job, R: Rows>(job: J, rows: &R, scratch: &mut Scratch) {
    job.run(rows, scratch)
}

/// The AVX2 build compiled with AVX-512 too, so the 512-bit chunk fold inlines into it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn run_avx512<J: Job, R: Rows>(job: J, rows: &R, scratch: &mut Scratch) {
    job.run(rows, scratch)
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// One tile: its rows of every KV head, partition after partition.
pub(super) struct TileJob<'a> {
    pub(super) ctx: &'a Ctx<'a>,
    pub(super) table: &'a BlockTable,
    /// Batch rows (consecutive positions of one sequence).
    pub(super) rows: Range<usize>,
    /// `[rows, num_heads * head_dim]`
    pub(super) out: &'a mut [f32],
}

impl Job for TileJob<'_> {
    #[inline(always)]
    fn run<R: Rows>(self, rows: &R, sc: &mut Scratch) {
        #[cfg(target_arch = "x86_64")]
        if let (Some(slabs), 1) = (rows.direct(), self.rows.len()) {
            if folds_direct(self.ctx.shape) {
                return self.run_lone_row(slabs, sc);
            }
        }
        let ctx = self.ctx;
        let (g, d) = (ctx.group(), ctx.shape.head_dim);
        let positions = &ctx.positions[self.rows.clone()];
        let n = positions.len() * g;
        let last = *positions.iter().max().expect("a tile has rows");
        // The first partition any row's window reaches.
        let first = positions
            .iter()
            .map(|&p| ctx.shape.first_visible(p))
            .min()
            .expect("a tile has rows")
            / PARTITION;
        sc.prepare(d, n);
        let Scratch {
            keys_t,
            values,
            queries,
            partition,
            total,
        } = sc;
        let mut bufs = ChunkBufs { keys_t, values };
        for kv_head in 0..ctx.shape.num_kv_heads {
            for (r, row) in self.rows.clone().enumerate() {
                ctx.load_queries(row, kv_head, &mut queries[r * g * d..(r + 1) * g * d]);
            }
            let span = Span {
                rows,
                table: self.table,
                shape: ctx.shape,
                kv_head,
                positions,
                isa: ctx.isa,
            };
            total.reset(n, d);
            for p in first..=last / PARTITION {
                let lo = p * PARTITION;
                partition.reset(n, d);
                span.fold(lo..lo + PARTITION, &queries[..n * d], &mut bufs, partition);
                for (r, &pos) in positions.iter().enumerate() {
                    // Only partitions the row sees join its total (as a lone row's merge).
                    if pos < lo || ctx.shape.first_visible(pos) >= lo + PARTITION {
                        continue;
                    }
                    for i in r * g..(r + 1) * g {
                        total.absorb(partition, i, d);
                    }
                }
            }
            let w = ctx.row_width();
            for r in 0..positions.len() {
                for h in 0..g {
                    let i = r * g + h;
                    let at = r * w + (kv_head * g + h) * d;
                    normalise(
                        total.sum[i],
                        &total.acc[i * d..(i + 1) * d],
                        &mut self.out[at..at + d],
                    );
                }
            }
        }
    }
}

impl TileJob<'_> {
    /// A lone decode row's every KV head, straight from the f16, `q8_0` or `fp8` cache, chunk by chunk with
    /// the heads inside: a block's keys of all heads are one contiguous run, and so are its
    /// values, where head by head the row's context is read as short pieces strided across
    /// the block, which streams from memory at about half the rate. Every head sees the
    /// tile path's operations in its order (chunks in order per partition, partitions
    /// merged in order), so the same bits. Inlined into the caller's target features: out
    /// of line, its partition merge called libm's `fmaf` per element (~2% of a 16-row
    /// Qwen3-0.6B decode step).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn run_lone_row(self, slabs: Direct, sc: &mut Scratch) {
        let ctx = self.ctx;
        let (g, d, heads) = (ctx.group(), ctx.shape.head_dim, ctx.shape.num_heads);
        let (row, pos) = (self.rows.start, ctx.positions[self.rows.start]);
        sc.prepare(d, heads);
        let Scratch {
            queries,
            partition,
            total,
            ..
        } = sc;
        for kv_head in 0..ctx.shape.num_kv_heads {
            ctx.load_queries(
                row,
                kv_head,
                &mut queries[kv_head * g * d..(kv_head + 1) * g * d],
            );
        }
        total.reset(heads, d);
        let first = ctx.shape.first_visible(pos);
        for lo in (first / PARTITION * PARTITION..=pos).step_by(PARTITION) {
            partition.reset(heads, d);
            let from = lo.max(first / CHUNK * CHUNK);
            for start in (from..(lo + PARTITION).min(pos + 1)).step_by(CHUNK) {
                let lanes = Lanes::of(start, pos, first).expect("a chunk of the window");
                for kv_head in 0..ctx.shape.num_kv_heads {
                    let mut chunk = direct_chunk(slabs, self.table, ctx.shape, kv_head, start);
                    if start + CHUNK <= pos {
                        let next =
                            direct_chunk(slabs, self.table, ctx.shape, kv_head, start + CHUNK);
                        chunk.set_next(&next);
                    }
                    let (h0, h1) = (kv_head * g, (kv_head + 1) * g);
                    let state = backends::avx2::HeadStates {
                        max: &mut partition.max[h0..h1],
                        sum: &mut partition.sum[h0..h1],
                        acc: &mut partition.acc[h0 * d..h1 * d],
                    };
                    let q = &queries[h0 * d..h1 * d];
                    // SAFETY: `direct` is only `Some` where the CPU has AVX2, FMA and F16C;
                    // `ctx.isa` is this build's.
                    unsafe { ctx.isa.fold_direct(q, &chunk, d, lanes, state) };
                }
            }
            for i in 0..heads {
                total.absorb(partition, i, d);
            }
        }
        for i in 0..heads {
            normalise(
                total.sum[i],
                &total.acc[i * d..(i + 1) * d],
                &mut self.out[i * d..(i + 1) * d],
            );
        }
    }
}

/// One partition of one KV head of a lone decode row; writes `[group, max, sum, acc[d]]`.
pub(super) struct PartitionJob<'a> {
    pub(super) ctx: &'a Ctx<'a>,
    pub(super) table: &'a BlockTable,
    pub(super) row: usize,
    pub(super) kv_head: usize,
    pub(super) part: usize,
    /// `[group * (head_dim + 2)]`: per head max, sum, then acc.
    pub(super) dst: &'a mut [f32],
}

impl Job for PartitionJob<'_> {
    #[inline(always)]
    fn run<R: Rows>(self, rows: &R, sc: &mut Scratch) {
        let ctx = self.ctx;
        let (g, d) = (ctx.group(), ctx.shape.head_dim);
        sc.prepare(d, g);
        let Scratch {
            keys_t,
            values,
            queries,
            partition,
            ..
        } = sc;
        ctx.load_queries(self.row, self.kv_head, &mut queries[..g * d]);
        let span = Span {
            rows,
            table: self.table,
            shape: ctx.shape,
            kv_head: self.kv_head,
            positions: &ctx.positions[self.row..self.row + 1],
            isa: ctx.isa,
        };
        let mut bufs = ChunkBufs { keys_t, values };
        partition.reset(g, d);
        let lo = self.part * PARTITION;
        span.fold(lo..lo + PARTITION, &queries[..g * d], &mut bufs, partition);
        for (h, dst) in self.dst.chunks_exact_mut(d + 2).enumerate() {
            dst[0] = partition.max[h];
            dst[1] = partition.sum[h];
            dst[2..].copy_from_slice(&partition.acc[h * d..(h + 1) * d]);
        }
    }
}

/// Merges a lone decode row's partitions in order, per head, and normalises.
pub(super) struct MergeJob<'a> {
    pub(super) group: usize,
    pub(super) head_dim: usize,
    /// `[kv_heads, parts, group, head_dim + 2]`
    pub(super) partials: &'a [f32],
    pub(super) parts: usize,
    /// `[num_heads * head_dim]`
    pub(super) out: &'a mut [f32],
}

impl Job for MergeJob<'_> {
    #[inline(always)]
    fn run<R: Rows>(self, _rows: &R, _scratch: &mut Scratch) {
        let (g, d) = (self.group, self.head_dim);
        let per_head = self.parts * g * (d + 2);
        // Head sizes up to 256 (every model we load) stay on the stack.
        let (mut stack, mut heap) = ([0.0f32; 256], Vec::new());
        let acc: &mut [f32] = if d <= stack.len() {
            &mut stack[..d]
        } else {
            heap.resize(d, 0.0);
            &mut heap
        };
        for (kv_head, partials) in self.partials.chunks_exact(per_head).enumerate() {
            for h in 0..g {
                let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
                acc.fill(0.0);
                for p in 0..self.parts {
                    let at = (p * g + h) * (d + 2);
                    let part = &partials[at..at + d + 2];
                    merge(
                        (&mut max, &mut sum, &mut *acc),
                        (part[0], part[1], &part[2..]),
                    );
                }
                let at = (kv_head * g + h) * d;
                normalise(sum, acc, &mut self.out[at..at + d]);
            }
        }
    }
}
