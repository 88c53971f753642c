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
//! Every path uses the same operation order and fused multiply-adds, so the AVX2 build of
//! the kernel, its AVX-512 build (a chunk's sixteen positions in one register) and the
//! portable build give identical bits. The build follows [`CpuKernel`]
//! (`TOKENMILL_CPU_KERNEL` picks both).

use crate::kernels::compute_pool::{ComputePool, Shards};
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kv::block_manager::BlockId;
use crate::kv::kv_cache::{KvLayer, KvSlab};
use crate::sched::forward_batch::{BatchSeq, ForwardBatch};
use std::cell::RefCell;
use std::ops::Range;

#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

/// Positions per online-softmax step: two AVX2 registers of scores, or one AVX-512 one.
pub const CHUNK: usize = 16;
/// Positions per flash-decoding partition (a multiple of `CHUNK`).
pub const PARTITION: usize = 512;
/// Query rows per prefill task: enough reuse of each K/V chunk, small enough state for L1.
pub const TILE_ROWS: usize = 16;
/// Heads of a tile's rows folded in one call where each row sees the whole chunk: what the
/// 512-bit fold keeps in registers (Qwen3-0.6B's two rows of two heads: 1.07–1.4× its
/// prefill attention; SmolLM2's three-head rows gained nothing from pairs of six).
#[cfg(target_arch = "x86_64")]
const FOLD_HEADS: usize = 4;

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
                        table: &batch.seqs[seq].block_table,
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
                        table: &batch.seqs[seq].block_table,
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

/// One step's attention work: tiles of query rows, and for lone decode rows split by KV
/// head and partition (flash-decoding), their partitions and then their merge.
#[derive(Default)]
struct Plan {
    /// The pool's tasks.
    tasks: Vec<Task>,
    /// Run after the tasks, one per split row.
    merges: Vec<Merge>,
    /// Split rows' partition states, `[kv_heads, parts, group, head_dim + 2]` per row.
    partials: Vec<f32>,
}

#[derive(Clone)]
enum Task {
    /// Batch rows `rows` (consecutive positions of sequence `seq`), every KV head.
    Tile { seq: usize, rows: Range<usize> },
    /// One (KV head, partition) of lone row `row`, into `partials[at..]`.
    Partition {
        seq: usize,
        row: usize,
        kv_head: usize,
        part: usize,
        at: usize,
    },
}

/// Merges lone row `row`'s `partials[at..at + len]` once its `parts` partitions are done.
struct Merge {
    row: usize,
    parts: usize,
    at: usize,
    len: usize,
}

thread_local! {
    /// Reused across steps, so a steady-state step allocates nothing here.
    static PLAN: RefCell<Plan> = RefCell::new(Plan::default());
}

impl Plan {
    fn build(&mut self, ctx: &Ctx, seqs: &[BatchSeq]) {
        self.tasks.clear();
        self.merges.clear();
        let (g, d) = (ctx.group(), ctx.shape.head_dim);
        let mut len = 0;
        for (i, seq) in seqs.iter().enumerate() {
            let rows = seq.rows.clone();
            // A decode row splits by KV head (and partition) when few sequences share the
            // threads or its context is long, or one thread would do it all while the
            // others wait: one tile holds every KV head of its rows. Among many short
            // decodes the split would only add work per row. Both give the same bits.
            let pos = ctx.positions[rows.start];
            if rows.len() == 1 && (!ctx.many_seqs || pos >= 2 * PARTITION) {
                let parts = pos / PARTITION + 1;
                let at = len;
                for kv_head in 0..ctx.shape.num_kv_heads {
                    for part in 0..parts {
                        self.tasks.push(Task::Partition {
                            seq: i,
                            row: rows.start,
                            kv_head,
                            part,
                            at: len,
                        });
                        len += g * (d + 2);
                    }
                }
                self.merges.push(Merge {
                    row: rows.start,
                    parts,
                    at,
                    len: len - at,
                });
                continue;
            }
            let mut start = rows.start;
            while start < rows.end {
                let end = (start + TILE_ROWS).min(rows.end);
                self.tasks.push(Task::Tile {
                    seq: i,
                    rows: start..end,
                });
                start = end;
            }
        }
        if self.partials.len() < len {
            self.partials.resize(len, 0.0);
        }
    }
}

struct Ctx<'a> {
    q: &'a [f32],
    positions: &'a [usize],
    shape: AttentionShape,
    /// Enough sequences to keep every thread busy one sequence at a time.
    many_seqs: bool,
    isa: Isa,
}

impl Ctx<'_> {
    fn row_width(&self) -> usize {
        self.shape.num_heads * self.shape.head_dim
    }

    fn group(&self) -> usize {
        self.shape.num_heads / self.shape.num_kv_heads
    }

    /// Query heads of `kv_head` at batch `row`, pre-multiplied by `log2(e) / sqrt(d)` so
    /// scores come out in base 2 and the softmax needs `exp2` only.
    #[inline(always)]
    fn load_queries(&self, row: usize, kv_head: usize, dst: &mut [f32]) {
        let (g, d) = (self.group(), self.shape.head_dim);
        let scale = std::f32::consts::LOG2_E / (d as f32).sqrt();
        let start = row * self.row_width() + kv_head * g * d;
        for (o, x) in dst.iter_mut().zip(&self.q[start..start + g * d]) {
            *o = x * scale;
        }
    }
}

/// Which build of the kernel runs. It follows the quantized kernels' [`CpuKernel`], so
/// `TOKENMILL_CPU_KERNEL` picks both and the startup line `kernel: …` names both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2's build plus the 512-bit chunk fold ([`zmm`]) where the head dim allows it.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    fn of(kernel: CpuKernel) -> Self {
        match kernel {
            CpuKernel::Portable => Isa::Portable,
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Avx2 | CpuKernel::AvxVnni => Isa::Avx2,
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Avx512Vnni => Isa::Avx512,
            #[cfg(not(target_arch = "x86_64"))]
            _ => Isa::Portable,
        }
    }

    /// Folds one chunk into a row's GQA group with the widest vector fold this build and
    /// head dim allow (both give the same bits).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C (`Rows::AVX2`), and AVX-512F where `self` is
    /// `Avx512` (which [`CpuKernel`] only picks on such a CPU); `d` a multiple of 32.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn fold_f32(
        self,
        q: &[f32],
        chunk: &avx2::F32Chunk,
        d: usize,
        valid: usize,
        heads: avx2::HeadStates,
    ) {
        match self {
            // SAFETY: the caller's contract.
            Isa::Avx512 if zmm::covers(d) => unsafe {
                zmm::fold_heads_f32(q, chunk, d, valid, heads)
            },
            _ => unsafe { avx2::fold_heads_f32(q, chunk, d, valid, heads) },
        }
    }

    /// How many query heads [`fold_batch_f32`](Self::fold_batch_f32) takes at head dim `d`,
    /// where it runs at all.
    #[cfg(target_arch = "x86_64")]
    fn batch_heads(self, d: usize) -> Option<usize> {
        (self == Isa::Avx512 && zmm::covers(d)).then_some(zmm::BATCH)
    }

    /// [`fold_f32`](Self::fold_f32) over heads that all see the whole chunk, phase by phase.
    ///
    /// # Safety
    /// As [`fold_f32`](Self::fold_f32), and `batch_heads(d)` is `Some`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn fold_batch_f32(
        self,
        q: &[f32],
        chunk: &avx2::F32Chunk,
        d: usize,
        heads: avx2::HeadStates,
    ) {
        assert!(self.batch_heads(d).is_some());
        // SAFETY: the caller's contract; the assert above.
        unsafe { zmm::fold_batch_f32(q, chunk, d, heads) }
    }

    /// [`fold_f32`](Self::fold_f32) from an f16 cache's chunk in place.
    ///
    /// # Safety
    /// As [`fold_f32`](Self::fold_f32).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn fold_f16(
        self,
        q: &[f32],
        chunk: &avx2::F16Chunk,
        d: usize,
        valid: usize,
        heads: avx2::HeadStates,
    ) {
        match self {
            // SAFETY: the caller's contract.
            Isa::Avx512 if zmm::covers(d) => unsafe {
                zmm::fold_heads_f16(q, chunk, d, valid, heads)
            },
            _ => unsafe { avx2::fold_heads_f16(q, chunk, d, valid, heads) },
        }
    }
}

/// Reads `dst.len()` consecutive cache elements at an element offset, widened to f32: a run of
/// positions of one key element, or one head's value row.
trait Rows: Sync {
    /// This copy of the kernel runs under AVX2 + FMA (`run_avx2`), so the chunk fold may
    /// use its explicit vector form (same operations, same order).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const AVX2: bool;
    fn key(&self, start: usize, dst: &mut [f32]);
    fn value(&self, start: usize, dst: &mut [f32]);
    /// The f16 cache's keys and values, where F16C may fold them without a widened copy.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn f16c_slabs(&self) -> Option<(&[u16], &[u16])> {
        None
    }
}

struct F32Rows<'a, const AVX2: bool> {
    keys: &'a [f32],
    values: &'a [f32],
}

impl<const AVX2: bool> Rows for F32Rows<'_, AVX2> {
    const AVX2: bool = AVX2;
    #[inline(always)]
    fn key(&self, start: usize, dst: &mut [f32]) {
        dst.copy_from_slice(&self.keys[start..start + dst.len()]);
    }
    #[inline(always)]
    fn value(&self, start: usize, dst: &mut [f32]) {
        dst.copy_from_slice(&self.values[start..start + dst.len()]);
    }
}

/// f16 bits; `F16C` widens 8 at a time with `vcvtph2ps` (only instantiated where detected).
struct F16Rows<'a, const F16C: bool> {
    keys: &'a [u16],
    values: &'a [u16],
}

impl<const F16C: bool> Rows for F16Rows<'_, F16C> {
    const AVX2: bool = F16C;
    #[inline(always)]
    fn key(&self, start: usize, dst: &mut [f32]) {
        widen_f16::<F16C>(&self.keys[start..start + dst.len()], dst);
    }
    #[inline(always)]
    fn value(&self, start: usize, dst: &mut [f32]) {
        widen_f16::<F16C>(&self.values[start..start + dst.len()], dst);
    }
    #[inline(always)]
    fn f16c_slabs(&self) -> Option<(&[u16], &[u16])> {
        F16C.then_some((self.keys, self.values))
    }
}

#[inline(always)]
fn widen_f16<const F16C: bool>(src: &[u16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if F16C {
        // SAFETY: `F16C` rows are only built when the CPU has F16C (see `dispatch`).
        return unsafe { widen_f16_f16c(src, dst) };
    }
    for (o, &h) in dst.iter_mut().zip(src) {
        *o = half::f16::from_bits(h).to_f32();
    }
}

/// Hardware f16→f32; exact, so the same bits as `half`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen_f16_f16c(src: &[u16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let n = dst.len().min(src.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` keeps both 8-element accesses inside the slices.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = half::f16::from_bits(src[j]).to_f32();
    }
}

/// bf16 bits: the top half of an f32, so widening is a shift.
struct Bf16Rows<'a, const AVX2: bool> {
    keys: &'a [u16],
    values: &'a [u16],
}

impl<const AVX2: bool> Rows for Bf16Rows<'_, AVX2> {
    const AVX2: bool = AVX2;
    #[inline(always)]
    fn key(&self, start: usize, dst: &mut [f32]) {
        widen_bf16(&self.keys[start..start + dst.len()], dst);
    }
    #[inline(always)]
    fn value(&self, start: usize, dst: &mut [f32]) {
        widen_bf16(&self.values[start..start + dst.len()], dst);
    }
}

#[inline(always)]
fn widen_bf16(src: &[u16], dst: &mut [f32]) {
    for (o, &h) in dst.iter_mut().zip(src) {
        *o = f32::from_bits((h as u32) << 16);
    }
}

/// A unit of work, generic over how K/V rows are read so each cache type and ISA gets its
/// own compiled copy.
trait Job {
    fn run<R: Rows>(self, rows: &R, scratch: &mut Scratch);
}

/// Runs `job` with this thread's scratch. The scratch is borrowed here, outside the
/// kernel: borrowed inside, the job's body sat in a closure of `LocalKey::with_borrow_mut`
/// that the compiler did not always inline into `run_avx2`, and so compiled it without
/// AVX2 and FMA (the f32 cache's attention called `fmaf` per element, ~60% of a prefill).
fn dispatch<J: Job>(isa: Isa, kv: &KvLayer, job: J) {
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
        _ => unreachable!("keys and values share one dtype"),
    })
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

/// Online-softmax state of several (row, head) pairs: running max (base 2), sum, and
/// unnormalised output.
#[derive(Default)]
struct State {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

impl State {
    /// Merges head `i` of a finished partition into this running total. Inlined into the
    /// caller's target features: out of line its `mul_add`s were libm `fmaf` calls, 2.6% of
    /// a Qwen3-0.6B prefill (`perf`).
    #[inline(always)]
    fn absorb(&mut self, part: &State, i: usize, d: usize) {
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

    fn reset(&mut self, n: usize, d: usize) {
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
struct Scratch {
    /// One chunk of keys, transposed: `[head_dim, CHUNK]`.
    keys_t: Vec<f32>,
    /// One chunk of values: `[CHUNK, head_dim]`.
    values: Vec<f32>,
    /// Scaled queries of the tile: `[rows * group, head_dim]`.
    queries: Vec<f32>,
    partition: State,
    total: State,
}

impl Scratch {
    fn prepare(&mut self, d: usize, queries: usize) {
        self.keys_t.resize(d * CHUNK, 0.0);
        self.values.resize(CHUNK * d, 0.0);
        self.queries.resize(queries * d, 0.0);
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Walks positions `span` (chunk-aligned) of one KV head for a run of consecutive query
/// rows at `positions`, folding each chunk into `state` for every row that sees it.
struct Span<'a, R> {
    rows: &'a R,
    table: &'a [BlockId],
    shape: AttentionShape,
    kv_head: usize,
    positions: &'a [usize],
    /// Read by the x86 folds only.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    isa: Isa,
}

impl<R: Rows> Span<'_, R> {
    #[inline(always)]
    fn fold(&self, span: Range<usize>, queries: &[f32], bufs: &mut ChunkBufs, state: &mut State) {
        let d = self.shape.head_dim;
        let g = queries.len() / d / self.positions.len();
        let last = *self.positions.iter().max().expect("a tile has rows");
        let end = span.end.min(last + 1);
        let mut start = span.start;
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
                if pos < start {
                    r += 1;
                    continue;
                }
                let valid = (pos - start + 1).min(CHUNK);
                #[cfg(target_arch = "x86_64")]
                if R::AVX2 && d.is_multiple_of(32) {
                    // Rows that all see the whole chunk fold as one run of heads (their
                    // states and queries lie side by side), so a key vector serves more
                    // heads and their softmax steps overlap: on 512-bit registers as many
                    // rows as a batch holds, phase by phase, otherwise a register's worth.
                    let batch = self.isa.batch_heads(d);
                    let most = batch.map_or(FOLD_HEADS, |heads| heads.max(g));
                    let mut n = 1;
                    while valid == CHUNK
                        && (n + 1) * g <= most
                        && self
                            .positions
                            .get(r + n)
                            .is_some_and(|&p| p >= start + CHUNK - 1)
                    {
                        n += 1;
                    }
                    let chunk = avx2::F32Chunk {
                        keys_t: bufs.keys_t,
                        values: bufs.values,
                    };
                    let heads = avx2::HeadStates {
                        max: &mut state.max[r * g..(r + n) * g],
                        sum: &mut state.sum[r * g..(r + n) * g],
                        acc: &mut state.acc[r * g * d..(r + n) * g * d],
                    };
                    let q = &queries[r * g * d..(r + n) * g * d];
                    // SAFETY: `AVX2` rows are only built when the CPU has AVX2, FMA and F16C;
                    // `isa` is the build's, so `Avx512` only where the CPU has AVX-512.
                    unsafe {
                        let heads_in = n * g;
                        if valid == CHUNK
                            && heads_in > FOLD_HEADS
                            && batch.is_some_and(|b| heads_in <= b)
                        {
                            self.isa.fold_batch_f32(q, &chunk, d, heads)
                        } else {
                            self.isa.fold_f32(q, &chunk, d, valid, heads)
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
                    fold_chunk(&queries[i * d..(i + 1) * d], bufs, valid, pair);
                }
                r += 1;
            }
            start += CHUNK;
        }
    }

    /// A lone row's chunk folded straight from an f16 cache when the chunk lies inside one
    /// block (AVX2 + F16C only); `false` leaves the chunk to the widened copy. With one row
    /// the copy is used by only the group's few heads, so writing and re-reading it cost
    /// more than widening on the fly (decode attention is most of its time otherwise).
    #[inline(always)]
    fn fold_direct(&self, start: usize, queries: &[f32], state: &mut State) -> bool {
        #[cfg(target_arch = "x86_64")]
        if let (Some((keys, values)), [pos]) = (self.rows.f16c_slabs(), self.positions) {
            let d = self.shape.head_dim;
            if !folds_direct(self.shape) {
                return false;
            }
            let chunk = f16_chunk((keys, values), self.table, self.shape, self.kv_head, start);
            let valid = (pos - start + 1).min(CHUNK);
            let g = queries.len() / d;
            let heads = avx2::HeadStates {
                max: &mut state.max[..g],
                sum: &mut state.sum[..g],
                acc: &mut state.acc[..g * d],
            };
            // SAFETY: `f16c_slabs` is only `Some` where the CPU has AVX2, FMA and F16C; `isa`
            // as in `fold`.
            unsafe { self.isa.fold_f16(queries, &chunk, d, valid, heads) };
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
            let (block, offset) = (self.table[pos / bs].index(), pos % bs);
            let run = (bs - offset).min(n - j);
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

/// Whether a lone row's chunks can be folded straight from an f16 cache: each chunk inside
/// one block, and a head dim the direct fold's registers cover.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn folds_direct(shape: AttentionShape) -> bool {
    shape.block_size.is_multiple_of(CHUNK) && shape.head_dim.is_multiple_of(32)
}

/// Where the chunk at position `start` of KV head `kv_head` sits in an f16 cache.
#[cfg(target_arch = "x86_64")]
fn f16_chunk<'a>(
    (keys, values): (&'a [u16], &'a [u16]),
    table: &[BlockId],
    shape: AttentionShape,
    kv_head: usize,
    start: usize,
) -> avx2::F16Chunk<'a> {
    let (d, bs) = (shape.head_dim, shape.block_size);
    let width = shape.num_kv_heads * d;
    let (block, offset) = (table[start / bs].index(), start % bs);
    avx2::F16Chunk {
        keys,
        first_key: (block * width + kv_head * d) * bs + offset,
        key_stride: bs,
        values,
        first_value: ((block * shape.num_kv_heads + kv_head) * bs + offset) * d,
        value_stride: d,
        next: None,
    }
}

/// One (row, head)'s online-softmax state.
struct PairState<'a> {
    max: &'a mut f32,
    sum: &'a mut f32,
    acc: &'a mut [f32],
}

struct ChunkBufs<'a> {
    keys_t: &'a mut [f32],
    values: &'a mut [f32],
}

/// Folds one chunk into one (row, head): scores for the first `valid` positions, a new
/// running max, rescaled sum and accumulator, then the weighted values.
#[inline(always)]
fn fold_chunk(q: &[f32], bufs: &ChunkBufs, valid: usize, state: PairState) {
    let PairState { max, sum, acc } = state;
    let s = chunk_scores(q, bufs.keys_t);
    let chunk_max = s[..valid].iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let new_max = max.max(chunk_max);
    let alpha = exp2(*max - new_max);
    let mut p = [0.0f32; CHUNK];
    for j in 0..CHUNK {
        let e = exp2(s[j] - new_max);
        // Lanes past `valid` hold other positions' (or stale) keys: weight zero.
        p[j] = if j < valid { e } else { 0.0 };
    }
    *sum = sum.mul_add(alpha, lane_sum(&p));
    *max = new_max;
    accumulate(acc, alpha, &p[..valid], bufs.values);
}

/// The chunk's weights summed in a fixed tree (halves, then quarters, then pairs): a
/// left-to-right sum is one chain of dependent adds, ~13% of a prefill's attention time.
/// Lanes past `valid` hold exact zeros, so they add nothing.
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

/// `acc = acc * alpha + Σ_j p_j v_j`, j in order. `ACC_LANES` of `acc` stay in registers
/// across the positions (independent FMA chains), the tail takes the same steps one by one.
/// 64 lanes are eight AVX2 chains, enough to cover the FMA latency (32 left the loop
/// latency-bound: 3–10% slower attention); the lanes do not change any element's order.
#[inline(always)]
fn accumulate(acc: &mut [f32], alpha: f32, p: &[f32], values: &[f32]) {
    let d = acc.len();
    let mut c = 0;
    while c + ACC_LANES <= d {
        let mut a = [0.0f32; ACC_LANES];
        for (x, &y) in a.iter_mut().zip(&acc[c..c + ACC_LANES]) {
            *x = y * alpha;
        }
        for (j, &w) in p.iter().enumerate() {
            let v = &values[j * d + c..j * d + c + ACC_LANES];
            for (x, &y) in a.iter_mut().zip(v) {
                *x = w.mul_add(y, *x);
            }
        }
        acc[c..c + ACC_LANES].copy_from_slice(&a);
        c += ACC_LANES;
    }
    for (i, x) in acc.iter_mut().enumerate().skip(c) {
        let mut a = *x * alpha;
        for (j, &w) in p.iter().enumerate() {
            a = w.mul_add(values[j * d + i], a);
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
fn merge(total: (&mut f32, &mut f32, &mut [f32]), part: (f32, f32, &[f32])) {
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
fn normalise(sum: f32, acc: &[f32], out: &mut [f32]) {
    let inv = 1.0 / sum;
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = a * inv;
    }
}

/// Taylor coefficients of 2^f on |f| ≤ 1/2, lowest degree first.
const EXP2_C: [f32; 7] = [
    1.0,
    std::f32::consts::LN_2,
    0.240_226_5,
    0.055_504_11,
    0.009_618_129,
    0.001_333_355_8,
    0.000_154_035_3,
];

/// 2^x for x ≤ 0 in plain f32 arithmetic, so it vectorises and gives the same bits on
/// every path: x = n + f with n an integer and |f| ≤ 1/2; 2^f from its degree-6 Taylor
/// polynomial (relative error below 3e-7), 2^n put straight into the exponent bits.
/// Inputs below -126 (weights under 1e-38 of the max) give exactly 0.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const C: [f32; 7] = EXP2_C;
    let xc = x.max(-126.0);
    let t = xc + ROUND;
    let n = t - ROUND;
    let f = xc - n;
    let mut p = C[6];
    for &c in C[..6].iter().rev() {
        p = p.mul_add(f, c);
    }
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let scale = f32::from_bits(((ni + 127) << 23) as u32);
    if x < -126.0 {
        0.0
    } else {
        p * scale
    }
}

/// [`fold_chunk`] written in AVX2 intrinsics for a run of query heads at once: the same
/// float operations in the same order per head and lane (so the same bits), but the chunk's
/// scores and weights stay in registers, each key and value vector is loaded once for up
/// to three heads, and the max is a vector tree (the max of numbers does not depend on the
/// order; a NaN score makes the row NaN either way).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{exp2, CHUNK};
    use std::arch::x86_64::*;

    const _: () = assert!(CHUNK == 16, "two 8-lane registers per chunk");

    /// One chunk's online-softmax update of one (row, head) from its scores `s`: masks the
    /// lanes at or past `valid`, raises the running max, rescales the sum; returns the
    /// accumulator's rescale factor and the chunk's weights (zero past `valid`).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn softmax_step(
        s: [__m256; 2],
        valid: usize,
        max: &mut f32,
        sum: &mut f32,
    ) -> (f32, [f32; CHUNK]) {
        // Lanes at or past `valid` out of the max, and weight zero.
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let live: [__m256; 2] = std::array::from_fn(|h| {
            let n = _mm256_set1_epi32(valid as i32 - 8 * h as i32);
            _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lane))
        });
        let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
        let m = _mm256_max_ps(
            _mm256_blendv_ps(ninf, s[0], live[0]),
            _mm256_blendv_ps(ninf, s[1], live[1]),
        );
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
        let new_max = max.max(_mm_cvtss_f32(m));
        let alpha = exp2(*max - new_max);
        let nm = _mm256_set1_ps(new_max);
        let p: [__m256; 2] =
            std::array::from_fn(|h| _mm256_and_ps(exp2_v(_mm256_sub_ps(s[h], nm)), live[h]));
        // The weights' sum in `lane_sum`'s tree: halves, quarters, then pairs.
        let h = _mm256_add_ps(p[0], p[1]);
        let qs = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let r = _mm_add_ps(qs, _mm_movehl_ps(qs, qs));
        let total = _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps::<1>(r, r)));
        *sum = sum.mul_add(alpha, total);
        *max = new_max;
        let mut w = [0.0f32; CHUNK];
        // SAFETY: `w` holds two 8-lane stores.
        unsafe {
            _mm256_storeu_ps(w.as_mut_ptr(), p[0]);
            _mm256_storeu_ps(w.as_mut_ptr().add(8), p[1]);
        }
        (alpha, w)
    }

    /// Where one chunk of one KV head sits in an f16 cache: key element `e` of the chunk's
    /// `CHUNK` positions at `keys[first_key + e * key_stride..][..CHUNK]`, position `j`'s
    /// values at `values[first_value + j * value_stride..][..head_dim]`.
    pub(super) struct F16Chunk<'a> {
        pub keys: &'a [u16],
        pub first_key: usize,
        pub key_stride: usize,
        pub values: &'a [u16],
        pub first_value: usize,
        pub value_stride: usize,
        /// The next chunk's first key and value elements (same head, same slabs), which
        /// the fold asks for line by line as it goes ([`prefetch_ahead`]).
        pub next: Option<(usize, usize)>,
    }

    /// A prefill tile's widened chunk: keys `[d, CHUNK]` (transposed), values `[CHUNK, d]`.
    pub(super) struct F32Chunk<'a> {
        pub keys_t: &'a [f32],
        pub values: &'a [f32],
    }

    /// Where one chunk's keys and values start and how far apart their rows are, in
    /// elements; `F16` picks which pair of pointers is read (the other is never used).
    #[derive(Clone, Copy)]
    pub(super) struct Source {
        pub keys16: *const u16,
        pub values16: *const u16,
        pub keys32: *const f32,
        pub values32: *const f32,
        pub key_stride: usize,
        pub value_stride: usize,
        /// The next chunk's keys and values, to prefetch while this one folds.
        pub ahead: Option<(*const u16, *const u16)>,
    }

    impl Source {
        /// Panics unless the chunk holds `d` key rows of `CHUNK` and `valid` value rows.
        pub(super) fn f16(c: &F16Chunk, d: usize, valid: usize) -> Self {
            assert!(d.is_multiple_of(32) && (1..=CHUNK).contains(&valid));
            assert!(c.keys.len() >= c.first_key + (d - 1) * c.key_stride + CHUNK);
            assert!(c.values.len() >= c.first_value + (valid - 1) * c.value_stride + d);
            Self {
                keys16: c.keys[c.first_key..].as_ptr(),
                values16: c.values[c.first_value..].as_ptr(),
                keys32: std::ptr::null(),
                values32: std::ptr::null(),
                key_stride: c.key_stride,
                value_stride: c.value_stride,
                // Prefetch addresses need not be in bounds: a prefetch never faults.
                ahead: c.next.map(|(k, v)| {
                    (
                        c.keys.as_ptr().wrapping_add(k),
                        c.values.as_ptr().wrapping_add(v),
                    )
                }),
            }
        }

        /// Panics unless the chunk holds `d` key rows of `CHUNK` and `CHUNK` value rows.
        pub(super) fn f32(c: &F32Chunk, d: usize, valid: usize) -> Self {
            assert!(d.is_multiple_of(32) && (1..=CHUNK).contains(&valid));
            assert!(c.keys_t.len() >= d * CHUNK && c.values.len() >= CHUNK * d);
            Self {
                keys16: std::ptr::null(),
                values16: std::ptr::null(),
                keys32: c.keys_t.as_ptr(),
                values32: c.values.as_ptr(),
                key_stride: CHUNK,
                value_stride: d,
                ahead: None,
            }
        }
    }

    /// Asks for line `e` of the next chunk `c.ahead` names (if any): its `d / 2` key lines
    /// at even `e`, its `d / 2` value lines at odd, so a fold that calls this once per key
    /// row it reads (`e` in `0..d`) spreads the next chunk's requests over its own work.
    /// (Asked for all at once before each head's fold, Qwen3-0.6B's 16-sequence decode
    /// attention read 0.39–0.56 ms a layer cold, and SmolLM2's 64-sequence one 0.40–0.49;
    /// this way 0.41–0.46 and 0.32–0.36, `attention_bench --rows 1 --cold`.)
    #[inline(always)]
    pub(super) fn prefetch_ahead(c: &Source, e: usize, d: usize) {
        let Some((keys, values)) = c.ahead else {
            return;
        };
        // A line holds two key rows of `CHUNK` f16s (a block's keys are `[d][CHUNK]`), or
        // 32 elements of one position's values.
        let line = if e.is_multiple_of(2) {
            keys.wrapping_add(e * c.key_stride)
        } else {
            let (l, per_row) = (e / 2, d / 32);
            values.wrapping_add(l / per_row * c.value_stride + l % per_row * 32)
        };
        // SAFETY: a prefetch reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(line as *const i8) };
    }

    /// Folds one chunk, read straight from an f16 cache, into every query head of one
    /// decode row's GQA group (`heads` holds exactly those heads). Per head it performs
    /// [`fold_chunk`]'s operations in its order (f16→f32 is exact), so the same bits; but
    /// no widened copy of the chunk is stored and read back, and each key and value vector
    /// is widened once for up to three heads at a time.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; the head dim `d` is a multiple of 32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn fold_heads_f16(
        queries: &[f32],
        chunk: &F16Chunk,
        d: usize,
        valid: usize,
        heads: HeadStates,
    ) {
        // SAFETY: the CPU has the features (caller's contract); `Source::f16` bounds the chunk.
        unsafe { fold_heads::<true>(queries, Source::f16(chunk, d, valid), d, valid, heads) }
    }

    /// [`fold_chunk`] for every query head of one prefill row's GQA group at once, from the
    /// tile's widened chunk: each key and value vector is loaded once for up to three heads
    /// instead of once per head, and the heads' softmax steps overlap. Per head the same
    /// operations in the same order, so the same bits.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; the head dim `d` is a multiple of 32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn fold_heads_f32(
        queries: &[f32],
        chunk: &F32Chunk,
        d: usize,
        valid: usize,
        heads: HeadStates,
    ) {
        // SAFETY: the CPU has the features (caller's contract); `Source::f32` bounds the chunk.
        unsafe { fold_heads::<false>(queries, Source::f32(chunk, d, valid), d, valid, heads) }
    }

    /// The fold state of a run of query heads: per head max, sum, and `d` accumulators.
    pub(super) struct HeadStates<'a> {
        pub max: &'a mut [f32],
        pub sum: &'a mut [f32],
        pub acc: &'a mut [f32],
    }

    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `src` must bound `d` key rows of `CHUNK` and
    /// `valid` value rows of `d`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn fold_heads<const F16: bool>(
        queries: &[f32],
        src: Source,
        d: usize,
        valid: usize,
        state: HeadStates,
    ) {
        let g = queries.len() / d;
        assert!(queries.len() == g * d);
        assert!(state.max.len() == g && state.sum.len() == g && state.acc.len() == g * d);
        let mut h = 0;
        while h < g {
            // Three heads fill the registers; two twos beat a three and a one.
            let take = match g - h {
                1 => 1,
                2 | 4 => 2,
                _ => 3,
            };
            let heads = Heads {
                q: &queries[h * d..(h + take) * d],
                max: &mut state.max[h..h + take],
                sum: &mut state.sum[h..h + take],
                acc: &mut state.acc[h * d..(h + take) * d],
            };
            // The next chunk is asked for once, by the first run of heads.
            let src = if h == 0 {
                src
            } else {
                Source { ahead: None, ..src }
            };
            // SAFETY: the caller bounds every read of `src`; `heads` is `take` heads.
            unsafe {
                match take {
                    1 => heads.fold::<1, F16>(src, d, valid),
                    2 => heads.fold::<2, F16>(src, d, valid),
                    _ => heads.fold::<3, F16>(src, d, valid),
                }
            }
            h += take;
        }
    }

    /// `G` query heads' slices of the fold state.
    struct Heads<'a> {
        q: &'a [f32],
        max: &'a mut [f32],
        sum: &'a mut [f32],
        acc: &'a mut [f32],
    }

    impl Heads<'_> {
        /// # Safety
        /// As [`fold_heads`], whose caller bounds the chunk; `self` holds `G` heads.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        // One index walks several register arrays at once (heads, halves, lanes).
        #[allow(clippy::needless_range_loop)]
        unsafe fn fold<const G: usize, const F16: bool>(self, c: Source, d: usize, valid: usize) {
            assert!(self.q.len() == G * d && self.acc.len() == G * d && self.max.len() == G);
            // Eight elements at `at` of the key rows (`keys`) or value rows, widened.
            let load = |p16: *const u16, p32: *const f32, at: usize| {
                // SAFETY: the caller bounds every `at` this fold forms.
                unsafe {
                    if F16 {
                        _mm256_cvtph_ps(_mm_loadu_si128(p16.add(at) as *const __m128i))
                    } else {
                        _mm256_loadu_ps(p32.add(at))
                    }
                }
            };
            // SAFETY: the caller bounds `c`'s reads; the assert above bounds `q` and `acc`.
            unsafe {
                // Scores, eight positions at a time: per head four partial sums over the
                // head dim (dims ≡ u mod 4), as `chunk_scores`.
                let q = self.q.as_ptr();
                let mut s = [[_mm256_setzero_ps(); 2]; G];
                for half in 0..2 {
                    let mut part = [[_mm256_setzero_ps(); 4]; G];
                    for quad in 0..d / 4 {
                        for u in 0..4 {
                            let e = 4 * quad + u;
                            if half == 0 {
                                prefetch_ahead(&c, e, d);
                            }
                            let k = load(c.keys16, c.keys32, e * c.key_stride + 8 * half);
                            for (h, p) in part.iter_mut().enumerate() {
                                let qe = _mm256_set1_ps(*q.add(h * d + e));
                                p[u] = _mm256_fmadd_ps(qe, k, p[u]);
                            }
                        }
                    }
                    for (h, p) in part.iter().enumerate() {
                        s[h][half] =
                            _mm256_add_ps(_mm256_add_ps(p[0], p[1]), _mm256_add_ps(p[2], p[3]));
                    }
                }
                let mut alpha = [0.0f32; G];
                let mut w = [[0.0f32; CHUNK]; G];
                for h in 0..G {
                    (alpha[h], w[h]) =
                        softmax_step(s[h], valid, &mut self.max[h], &mut self.sum[h]);
                }
                // acc = acc · alpha + Σ_j p_j v_j per head, j in order, 32 lanes at a time.
                let acc = self.acc.as_mut_ptr();
                for base in (0..d).step_by(32) {
                    let mut a: [[__m256; 4]; G] = std::array::from_fn(|h| {
                        let al = _mm256_set1_ps(alpha[h]);
                        std::array::from_fn(|i| {
                            _mm256_mul_ps(_mm256_loadu_ps(acc.add(h * d + base + 8 * i)), al)
                        })
                    });
                    for j in 0..valid {
                        let row = j * c.value_stride + base;
                        let wb: [__m256; G] = std::array::from_fn(|h| _mm256_set1_ps(w[h][j]));
                        for i in 0..4 {
                            let v = load(c.values16, c.values32, row + 8 * i);
                            for h in 0..G {
                                a[h][i] = _mm256_fmadd_ps(wb[h], v, a[h][i]);
                            }
                        }
                    }
                    for (h, ah) in a.iter().enumerate() {
                        for (i, x) in ah.iter().enumerate() {
                            _mm256_storeu_ps(acc.add(h * d + base + 8 * i), *x);
                        }
                    }
                }
            }
        }
    }

    /// [`exp2`] on eight lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp2_v(x: __m256) -> __m256 {
        const ROUND: f32 = 12_582_912.0;
        let c = super::EXP2_C;
        let lo = _mm256_set1_ps(-126.0);
        // `f32::max(x, -126)`: a NaN `x` gives −126, as `maxps` with −126 second does.
        let xc = _mm256_max_ps(x, lo);
        let round = _mm256_set1_ps(ROUND);
        let t = _mm256_add_ps(xc, round);
        let n = _mm256_sub_ps(t, round);
        let f = _mm256_sub_ps(xc, n);
        let mut p = _mm256_set1_ps(c[6]);
        for &k in c[..6].iter().rev() {
            p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(k));
        }
        let ni = _mm256_sub_epi32(
            _mm256_castps_si256(t),
            _mm256_set1_epi32(ROUND.to_bits() as i32),
        );
        let scale = _mm256_slli_epi32::<23>(_mm256_add_epi32(ni, _mm256_set1_epi32(127)));
        let v = _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
        // x < −126 gives exactly 0.
        _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, lo), v)
    }
}

/// [`avx2`]'s chunk fold on 512-bit registers: a chunk's sixteen positions fill one
/// register instead of two halves, so the fold issues half the instructions (on cores with
/// full-width units, such as Zen 5, half the cycles). Per head and lane the same float
/// operations in the same order, and the horizontal max and sum take the 256-bit halves in
/// `avx2`'s order, so the same bits. Needs a head dim that is a multiple of 64 (four
/// registers of accumulator per head); others take the `avx2` fold.
#[cfg(target_arch = "x86_64")]
mod zmm {
    use super::avx2::{prefetch_ahead, F16Chunk, F32Chunk, HeadStates, Source};
    use super::{exp2, CHUNK};
    use std::arch::x86_64::*;

    const _: () = assert!(CHUNK == 16, "one 16-lane register per chunk");

    /// The AVX-512 fold runs for this head dim.
    pub(super) fn covers(d: usize) -> bool {
        d.is_multiple_of(64)
    }

    /// [`super::avx2::fold_heads_f16`] on 512-bit registers.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2, FMA and F16C; `covers(d)`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn fold_heads_f16(
        queries: &[f32],
        chunk: &F16Chunk,
        d: usize,
        valid: usize,
        heads: HeadStates,
    ) {
        assert!(covers(d));
        // SAFETY: the CPU has the features (caller's contract); `Source::f16` bounds the chunk.
        unsafe { fold_heads::<true>(queries, Source::f16(chunk, d, valid), d, valid, heads) }
    }

    /// [`super::avx2::fold_heads_f32`] on 512-bit registers.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2, FMA and F16C; `covers(d)`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn fold_heads_f32(
        queries: &[f32],
        chunk: &F32Chunk,
        d: usize,
        valid: usize,
        heads: HeadStates,
    ) {
        assert!(covers(d));
        // SAFETY: the CPU has the features (caller's contract); `Source::f32` bounds the chunk.
        unsafe { fold_heads::<false>(queries, Source::f32(chunk, d, valid), d, valid, heads) }
    }

    /// # Safety
    /// As the two entry points above, which bound `src`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn fold_heads<const F16: bool>(
        queries: &[f32],
        src: Source,
        d: usize,
        valid: usize,
        state: HeadStates,
    ) {
        let g = queries.len() / d;
        assert!(queries.len() == g * d);
        assert!(state.max.len() == g && state.sum.len() == g && state.acc.len() == g * d);
        let mut h = 0;
        while h < g {
            let take = run_len(g - h);
            let heads = Heads {
                q: &queries[h * d..(h + take) * d],
                max: &mut state.max[h..h + take],
                sum: &mut state.sum[h..h + take],
                acc: &mut state.acc[h * d..(h + take) * d],
            };
            // The next chunk is asked for once, by the first run of heads.
            let src = if h == 0 {
                src
            } else {
                Source { ahead: None, ..src }
            };
            // SAFETY: the caller bounds every read of `src`; `heads` is `take` heads.
            unsafe {
                match take {
                    1 => heads.fold::<1, F16>(src, d, valid),
                    2 => heads.fold::<2, F16>(src, d, valid),
                    3 => heads.fold::<3, F16>(src, d, valid),
                    _ => heads.fold::<4, F16>(src, d, valid),
                }
            }
            h += take;
        }
    }

    /// Heads in the next run when `left` remain: four fill the 32 registers (16 partial
    /// sums or accumulators, 4 weights); a three and a two beat a four and a one.
    #[inline(always)]
    fn run_len(left: usize) -> usize {
        if left == 5 {
            3
        } else {
            left.min(4)
        }
    }

    /// `G` query heads' slices of the fold state.
    struct Heads<'a> {
        q: &'a [f32],
        max: &'a mut [f32],
        sum: &'a mut [f32],
        acc: &'a mut [f32],
    }

    impl Heads<'_> {
        /// # Safety
        /// As [`fold_heads`], whose caller bounds the chunk; `self` holds `G` heads.
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        // One index walks several register arrays at once (heads, lanes).
        #[allow(clippy::needless_range_loop)]
        unsafe fn fold<const G: usize, const F16: bool>(self, c: Source, d: usize, valid: usize) {
            assert!(self.q.len() == G * d && self.acc.len() == G * d && self.max.len() == G);
            // SAFETY: the caller bounds `c`'s reads; the assert above bounds `q` and `acc`.
            unsafe {
                let s = scores::<G, F16>(self.q.as_ptr(), &c, d);
                let mut alpha = [0.0f32; G];
                let mut w = [[0.0f32; CHUNK]; G];
                for h in 0..G {
                    (alpha[h], w[h]) =
                        softmax_step(s[h], valid, &mut self.max[h], &mut self.sum[h]);
                }
                accumulate::<G, F16>(self.acc.as_mut_ptr(), &c, d, valid, (&alpha, &w));
            }
        }
    }

    /// Sixteen elements at `at` of the key rows or value rows, widened.
    ///
    /// # Safety
    /// The caller bounds `at` within the chunk `c` names.
    #[inline(always)]
    unsafe fn load<const F16: bool>(p16: *const u16, p32: *const f32, at: usize) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe {
            if F16 {
                _mm512_cvtph_ps(_mm256_loadu_si256(p16.add(at) as *const __m256i))
            } else {
                _mm512_loadu_ps(p32.add(at))
            }
        }
    }

    /// Scores of the chunk's sixteen positions for the `G` query heads at `q` (`[G, d]`):
    /// per head four partial sums over the head dim (dims ≡ u mod 4), as `chunk_scores`.
    ///
    /// Inlined into the caller's target features (out of line, each call returned its
    /// registers through memory).
    ///
    /// # Safety
    /// `q` holds `G · d` floats; `c` bounds `d` key rows of `CHUNK`.
    #[inline(always)]
    unsafe fn scores<const G: usize, const F16: bool>(
        q: *const f32,
        c: &Source,
        d: usize,
    ) -> [__m512; G] {
        // SAFETY: the caller's contract bounds every read.
        unsafe {
            let mut part = [[_mm512_setzero_ps(); 4]; G];
            for quad in 0..d / 4 {
                for u in 0..4 {
                    let e = 4 * quad + u;
                    prefetch_ahead(c, e, d);
                    let k = load::<F16>(c.keys16, c.keys32, e * c.key_stride);
                    for (h, p) in part.iter_mut().enumerate() {
                        let qe = _mm512_set1_ps(*q.add(h * d + e));
                        p[u] = _mm512_fmadd_ps(qe, k, p[u]);
                    }
                }
            }
            std::array::from_fn(|h| {
                let p = &part[h];
                _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]))
            })
        }
    }

    /// `acc = acc · alpha + Σ_j w_j v_j` for the `G` heads' accumulators at `acc` (`[G, d]`),
    /// positions `j` in order, 64 lanes at a time.
    ///
    /// Inlined into the caller's target features, as [`scores`].
    ///
    /// # Safety
    /// `acc` holds `G · d` floats; `c` bounds `valid` value rows of `d`.
    #[inline(always)]
    // One index walks several register arrays at once (heads, lanes).
    #[allow(clippy::needless_range_loop)]
    unsafe fn accumulate<const G: usize, const F16: bool>(
        acc: *mut f32,
        c: &Source,
        d: usize,
        valid: usize,
        (alpha, w): (&[f32; G], &[[f32; CHUNK]; G]),
    ) {
        // SAFETY: the caller's contract bounds every read and write.
        unsafe {
            for base in (0..d).step_by(64) {
                let mut a: [[__m512; 4]; G] = std::array::from_fn(|h| {
                    let al = _mm512_set1_ps(alpha[h]);
                    std::array::from_fn(|i| {
                        _mm512_mul_ps(_mm512_loadu_ps(acc.add(h * d + base + 16 * i)), al)
                    })
                });
                for j in 0..valid {
                    let row = j * c.value_stride + base;
                    let wb: [__m512; G] = std::array::from_fn(|h| _mm512_set1_ps(w[h][j]));
                    for i in 0..4 {
                        let v = load::<F16>(c.values16, c.values32, row + 16 * i);
                        for h in 0..G {
                            a[h][i] = _mm512_fmadd_ps(wb[h], v, a[h][i]);
                        }
                    }
                }
                for (h, ah) in a.iter().enumerate() {
                    for (i, x) in ah.iter().enumerate() {
                        _mm512_storeu_ps(acc.add(h * d + base + 16 * i), *x);
                    }
                }
            }
        }
    }

    /// Most query heads [`fold_batch_f32`] takes at once (a 16-row prefill tile of two-head
    /// groups).
    pub(super) const BATCH: usize = 32;

    /// [`fold_heads_f32`] for a chunk every one of the (up to [`BATCH`]) heads sees whole,
    /// phase by phase: every head's scores, then every head's softmax step, then every
    /// head's values. Each head performs the same operations in the same order as in
    /// [`fold_heads_f32`], so the same bits; but the softmax steps, chains of dependent
    /// reductions and `exp2`, no longer sit between a run of heads' multiply-adds and the
    /// next's, where each run waited for its own.
    ///
    /// # Safety
    /// As [`fold_heads_f32`].
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn fold_batch_f32(
        queries: &[f32],
        chunk: &F32Chunk,
        d: usize,
        state: HeadStates,
    ) {
        assert!(covers(d));
        let n = queries.len() / d;
        assert!(queries.len() == n * d && n <= BATCH);
        assert!(state.max.len() == n && state.sum.len() == n && state.acc.len() == n * d);
        let c = Source::f32(chunk, d, CHUNK);
        let (q, acc) = (queries.as_ptr(), state.acc.as_mut_ptr());
        let mut s = [_mm512_setzero_ps(); BATCH];
        let mut h = 0;
        while h < n {
            let t = run_len(n - h);
            // SAFETY: `Source::f32` bounds the chunk; the asserts bound `q` for `n` heads,
            // and this run reads its own `t`.
            unsafe {
                let q = q.add(h * d);
                match t {
                    1 => s[h..h + 1].copy_from_slice(&scores::<1, false>(q, &c, d)),
                    2 => s[h..h + 2].copy_from_slice(&scores::<2, false>(q, &c, d)),
                    3 => s[h..h + 3].copy_from_slice(&scores::<3, false>(q, &c, d)),
                    _ => s[h..h + 4].copy_from_slice(&scores::<4, false>(q, &c, d)),
                }
            }
            h += t;
        }
        let mut alpha = [0.0f32; BATCH];
        let mut w = [[0.0f32; CHUNK]; BATCH];
        for h in 0..n {
            (alpha[h], w[h]) = softmax_step(s[h], CHUNK, &mut state.max[h], &mut state.sum[h]);
        }
        let mut h = 0;
        while h < n {
            let t = run_len(n - h);
            macro_rules! run {
                ($g:literal) => {
                    // SAFETY: as above, for `acc`.
                    unsafe {
                        accumulate::<$g, false>(
                            acc.add(h * d),
                            &c,
                            d,
                            CHUNK,
                            (
                                alpha[h..h + $g].try_into().expect("a run's alphas"),
                                w[h..h + $g].try_into().expect("a run's weights"),
                            ),
                        )
                    }
                };
            }
            match t {
                1 => run!(1),
                2 => run!(2),
                3 => run!(3),
                _ => run!(4),
            }
            h += t;
        }
    }

    /// [`super::avx2`]'s softmax step on one register of scores: the max and the sum fold
    /// the two 256-bit halves as `avx2` folds its two registers, low half first.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn softmax_step(s: __m512, valid: usize, max: &mut f32, sum: &mut f32) -> (f32, [f32; CHUNK]) {
        let live: __mmask16 = if valid >= CHUNK { !0 } else { (1 << valid) - 1 };
        let m = _mm512_mask_blend_ps(live, _mm512_set1_ps(f32::NEG_INFINITY), s);
        let m = _mm256_max_ps(_mm512_castps512_ps256(m), upper(m));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
        let new_max = max.max(_mm_cvtss_f32(m));
        let alpha = exp2(*max - new_max);
        let p = _mm512_maskz_mov_ps(live, exp2_v(_mm512_sub_ps(s, _mm512_set1_ps(new_max))));
        // The weights' sum in `lane_sum`'s tree: halves, quarters, then pairs.
        let h = _mm256_add_ps(_mm512_castps512_ps256(p), upper(p));
        let qs = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let r = _mm_add_ps(qs, _mm_movehl_ps(qs, qs));
        let total = _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps::<1>(r, r)));
        *sum = sum.mul_add(alpha, total);
        *max = new_max;
        let mut w = [0.0f32; CHUNK];
        // SAFETY: `w` holds one 16-lane store.
        unsafe { _mm512_storeu_ps(w.as_mut_ptr(), p) };
        (alpha, w)
    }

    /// Lanes 8..16 (AVX-512F alone has no 32-bit-lane extract).
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    fn upper(x: __m512) -> __m256 {
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)))
    }

    /// [`exp2`] on sixteen lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn exp2_v(x: __m512) -> __m512 {
        const ROUND: f32 = 12_582_912.0;
        let c = super::EXP2_C;
        let lo = _mm512_set1_ps(-126.0);
        // `f32::max(x, -126)`: a NaN `x` gives −126, as `maxps` with −126 second does.
        let xc = _mm512_max_ps(x, lo);
        let round = _mm512_set1_ps(ROUND);
        let t = _mm512_add_ps(xc, round);
        let n = _mm512_sub_ps(t, round);
        let f = _mm512_sub_ps(xc, n);
        let mut p = _mm512_set1_ps(c[6]);
        for &k in c[..6].iter().rev() {
            p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(k));
        }
        let ni = _mm512_sub_epi32(
            _mm512_castps_si512(t),
            _mm512_set1_epi32(ROUND.to_bits() as i32),
        );
        let scale = _mm512_slli_epi32::<23>(_mm512_add_epi32(ni, _mm512_set1_epi32(127)));
        let v = _mm512_mul_ps(p, _mm512_castsi512_ps(scale));
        // x < −126 gives exactly 0.
        let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
        _mm512_maskz_mov_ps(!below, v)
    }
}

/// One tile: its rows of every KV head, partition after partition.
struct TileJob<'a> {
    ctx: &'a Ctx<'a>,
    table: &'a [BlockId],
    /// Batch rows (consecutive positions of one sequence).
    rows: Range<usize>,
    /// `[rows, num_heads * head_dim]`
    out: &'a mut [f32],
}

impl Job for TileJob<'_> {
    #[inline(always)]
    fn run<R: Rows>(self, rows: &R, sc: &mut Scratch) {
        #[cfg(target_arch = "x86_64")]
        if let (Some(slabs), 1) = (rows.f16c_slabs(), self.rows.len()) {
            if folds_direct(self.ctx.shape) {
                return self.run_lone_row(slabs, sc);
            }
        }
        let ctx = self.ctx;
        let (g, d) = (ctx.group(), ctx.shape.head_dim);
        let positions = &ctx.positions[self.rows.clone()];
        let n = positions.len() * g;
        let last = *positions.iter().max().expect("a tile has rows");
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
            for p in 0..=last / PARTITION {
                let lo = p * PARTITION;
                partition.reset(n, d);
                span.fold(lo..lo + PARTITION, &queries[..n * d], &mut bufs, partition);
                for (r, &pos) in positions.iter().enumerate() {
                    if pos < lo {
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
    /// A lone decode row's every KV head, straight from the f16 cache, chunk by chunk with
    /// the heads inside: a block's keys of all heads are one contiguous run, and so are its
    /// values, where head by head the row's context is read as short pieces strided across
    /// the block, which streams from memory at about half the rate. Every head sees the
    /// tile path's operations in its order (chunks in order per partition, partitions
    /// merged in order), so the same bits. Inlined into the caller's target features: out
    /// of line, its partition merge called libm's `fmaf` per element (~2% of a 16-row
    /// Qwen3-0.6B decode step).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn run_lone_row(self, slabs: (&[u16], &[u16]), sc: &mut Scratch) {
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
        for lo in (0..=pos).step_by(PARTITION) {
            partition.reset(heads, d);
            for start in (lo..(lo + PARTITION).min(pos + 1)).step_by(CHUNK) {
                let valid = (pos - start + 1).min(CHUNK);
                for kv_head in 0..ctx.shape.num_kv_heads {
                    let mut chunk = f16_chunk(slabs, self.table, ctx.shape, kv_head, start);
                    if start + CHUNK <= pos {
                        let next = f16_chunk(slabs, self.table, ctx.shape, kv_head, start + CHUNK);
                        chunk.next = Some((next.first_key, next.first_value));
                    }
                    let (h0, h1) = (kv_head * g, (kv_head + 1) * g);
                    let state = avx2::HeadStates {
                        max: &mut partition.max[h0..h1],
                        sum: &mut partition.sum[h0..h1],
                        acc: &mut partition.acc[h0 * d..h1 * d],
                    };
                    let q = &queries[h0 * d..h1 * d];
                    // SAFETY: `f16c_slabs` is only `Some` where the CPU has AVX2, FMA and F16C;
                    // `ctx.isa` is this build's.
                    unsafe { ctx.isa.fold_f16(q, &chunk, d, valid, state) };
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
struct PartitionJob<'a> {
    ctx: &'a Ctx<'a>,
    table: &'a [BlockId],
    row: usize,
    kv_head: usize,
    part: usize,
    /// `[group * (head_dim + 2)]`: per head max, sum, then acc.
    dst: &'a mut [f32],
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
struct MergeJob<'a> {
    group: usize,
    head_dim: usize,
    /// `[kv_heads, parts, group, head_dim + 2]`
    partials: &'a [f32],
    parts: usize,
    /// `[num_heads * head_dim]`
    out: &'a mut [f32],
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
