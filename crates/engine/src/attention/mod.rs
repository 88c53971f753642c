//! Causal attention over the paged KV cache: one pass of online softmax, our own CPU kernel.
//!
//! Work is one task per (sequence, tile of up to `TILE_ROWS` query rows). A task walks its
//! sequence's context in chunks of `CHUNK` positions; each chunk's keys and values are read
//! through the block table and widened to f32 once, then used by every query row and every
//! query head of the GQA group, so a prefill reads K/V once per tile instead of once per
//! token. Each (row, head) keeps a running max, sum and accumulator (flash attention) and
//! rescales them as the max grows; scores are never materialised.
//!
//! The context is cut into partitions of `PARTITION` positions. Within a partition chunks
//! are folded in order; partitions are merged in order. A lone decode row with a long
//! context computes its partitions in parallel (flash-decoding) and merges them in that
//! same order, so it performs exactly the same float operations as a row inside a prefill
//! tile. Cuts depend only on positions, never on the batch: a token's output has the same
//! bits whatever it is batched with.
//!
//! A sliding-window layer's row sees only its window: chunks before it are skipped, the
//! chunk the window starts in has its earlier lanes masked ([`lanes::Lanes`]), and
//! partitions before it are neither folded nor merged, per row, so the same bits again
//! whichever path (tile, partition, direct f16 fold) computes the row. Its group's blocks
//! before the window may be released: the table answers `None` for them, and the lanes of
//! a chunk that lie in such a block are zeroed instead of read (they are masked anyway).
//!
//! Every path uses the same operation order and fused multiply-adds, so the AVX2 build of
//! the kernel, its AVX-512 build (a chunk's sixteen positions in one register) and the
//! portable build give identical bits. The build follows [`CpuKernel`]
//! (`TOKENMILL_CPU_KERNEL` picks both).
//!
//! Files, one concept or one instruction set each (no two name each other, directly or
//! around a circle): `plan.rs` cuts a step into tasks (`Plan`, over the step's `Ctx`);
//! `jobs.rs` runs a task (`TileJob`, `PartitionJob`, `MergeJob`) compiled once per cache
//! dtype and instruction set; `online_softmax.rs` the portable fold (`Span` walks a KV
//! head's chunks, `State` the running max, sum and output); `rows.rs` reads f32/f16/bf16
//! K/V rows; `lanes.rs` the lanes of a chunk a row sees (`Lanes`); `exp2.rs` the
//! same-bits `exp2`; `backends/` the x86 folds that give the portable fold's bits (`Isa`,
//! `avx2.rs`, `avx512.rs`).

mod backends;
mod exp2;
mod jobs;
mod lanes;
mod online_softmax;
mod plan;
mod rows;

use crate::config::{KvGroup, SlidingWindow};
use crate::forward_batch::ForwardBatch;
use crate::kernels::compute_pool::{ComputePool, Shards};
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kv::kv_cache::KvLayer;
use backends::Isa;
use jobs::{dispatch, MergeJob, PartitionJob, TileJob};
use plan::{Ctx, Plan, Task, PLAN};

pub use exp2::exp2;

/// Query heads, KV heads (a GQA group is their ratio), head dim, KV cache block size, the
/// layer's sliding window (`None`: every earlier position), and the KV cache group whose
/// block tables the layer reads.
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub window: Option<SlidingWindow>,
    pub kv_group: KvGroup,
}

impl AttentionShape {
    /// The first position a row at `pos` attends to.
    #[inline(always)]
    pub fn first_visible(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| w.first_visible(pos))
    }
}

/// Positions per online-softmax step: two AVX2 registers of scores, or one AVX-512 one.
pub const CHUNK: usize = 16;
/// Positions per flash-decoding partition (a multiple of `CHUNK`).
pub const PARTITION: usize = 512;
/// Query rows per prefill task: enough reuse of each K/V chunk, small enough state for L1.
pub const TILE_ROWS: usize = 16;

/// `q`: `[T, num_heads * head_dim]` (already rotated) → `[T, num_heads * head_dim]`.
pub fn paged_attention(
    q: &[f32],
    kv: &KvLayer,
    batch: &ForwardBatch,
    shape: AttentionShape,
) -> Vec<f32> {
    let mut out = vec![0.0f32; q.len()];
    paged_attention_into(q, kv, batch, shape, &mut out);
    out
}

/// As `paged_attention`, writing into `out` (`q.len()` floats, every element overwritten).
pub fn paged_attention_into(
    q: &[f32],
    kv: &KvLayer,
    batch: &ForwardBatch,
    shape: AttentionShape,
    out: &mut [f32],
) {
    attend(q, kv, batch, shape, out, Isa::of(CpuKernel::active()));
}

/// As `paged_attention`, with the build of the kernel that goes with `kernel` whatever
/// [`CpuKernel::active`] is: for tests that compare the builds bit for bit.
///
/// # Panics
/// If this CPU cannot run `kernel`.
pub fn paged_attention_with(
    kernel: CpuKernel,
    q: &[f32],
    kv: &KvLayer,
    batch: &ForwardBatch,
    shape: AttentionShape,
) -> Vec<f32> {
    assert!(kernel.is_supported(), "this CPU cannot run {kernel}");
    let mut out = vec![0.0f32; q.len()];
    attend(q, kv, batch, shape, &mut out, Isa::of(kernel));
    out
}

fn attend(
    q: &[f32],
    kv: &KvLayer,
    batch: &ForwardBatch,
    shape: AttentionShape,
    out: &mut [f32],
    isa: Isa,
) {
    assert_eq!(out.len(), q.len(), "output and query sizes differ");
    assert_eq!(
        shape.num_heads % shape.num_kv_heads,
        0,
        "query heads must be a multiple of KV heads"
    );
    let pool = ComputePool::global();
    let ctx = Ctx {
        q,
        positions: &batch.positions,
        shape,
        many_seqs: batch.seqs.len() >= 4 * pool.threads(),
        isa,
    };
    PLAN.with_borrow_mut(|plan| {
        plan.build(&ctx, &batch.seqs);
        let Plan {
            tasks,
            merges,
            partials,
        } = plan;
        let w = ctx.row_width();
        {
            let (out, partials) = (Shards::new(&mut *out), Shards::new(&mut partials[..]));
            // SAFETY (both arms): every item writes its own rows of `out` or its own range
            // of `partials` (`Plan::build` lays them out side by side).
            pool.run(tasks.len(), &|i| match tasks[i].clone() {
                Task::Tile { seq, rows } => {
                    let job = TileJob {
                        ctx: &ctx,
                        table: &batch.seqs[seq].block_tables[shape.kv_group],
                        out: unsafe { out.range(rows.start * w..rows.end * w) },
                        rows,
                    };
                    dispatch(isa, kv, job);
                }
                Task::Partition {
                    seq,
                    row,
                    kv_head,
                    part,
                    at,
                } => {
                    let per_part = ctx.group() * (shape.head_dim + 2);
                    let job = PartitionJob {
                        ctx: &ctx,
                        table: &batch.seqs[seq].block_tables[shape.kv_group],
                        row,
                        kv_head,
                        part,
                        dst: unsafe { partials.range(at..at + per_part) },
                    };
                    dispatch(isa, kv, job);
                }
            });
        }
        // A split row's partitions are all done: merge them in order.
        for m in merges.iter() {
            let job = MergeJob {
                group: ctx.group(),
                head_dim: shape.head_dim,
                partials: &partials[m.at..m.at + m.len],
                parts: m.parts,
                out: &mut out[m.row * w..(m.row + 1) * w],
            };
            dispatch(isa, kv, job);
        }
    });
}
