//! `KvCache`: the paged key/value storage, in f32, f16, bf16, `q8_0` ([`Q8Slab`]) or `fp8`
//! ([`Fp8Slab`]): one pair of slabs per layer of a KV cache group ([`KvCacheGroups`]),
//! shared by every group.
//!
//! A page (block) `b` is row `b` of each of the `group_size` slab pairs: layer `l` (group
//! `G(l)`, index `j(l)`) keeps its keys and values in slab pair `j(l)`, at the pages its
//! sequence's table of group `G(l)` names. With one group of every layer (Llama, Qwen)
//! that is one slab pair per layer, as a cache without groups has it.
//!
//! Slot `s` (`block * block_size + offset`) holds one token's key and value for every KV
//! head. Keys are stored transposed within each block, `[block][num_kv_heads * head_dim]
//! [block_size]`: attention scores a run of positions at once with positions in the SIMD
//! lanes, so it wants one key element of consecutive positions side by side. Values are
//! head-major within each block, `[block][num_kv_heads][block_size][head_dim]`: attention
//! reads one KV head at a time, and so reads each block's keys and values of that head as
//! two contiguous runs (token-major values would be short pieces a whole row apart, which a
//! prefetcher streams worse than one run). Writing a token scatters it once; every
//! later step reads it many times, already in that order.
//! Keys and values are computed in f32 and rounded (to nearest, ties to even) or quantized
//! when stored; the attention kernel widens them back to f32 as it reads, which is exact.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
use std::ops::Range;

use crate::config::model_config::KvHeads;
use crate::config::{KvCacheDtype, KvCacheGroups};
use crate::kernels::compute_pool::ComputePool;
use crate::kv::fp8_slab::{E4m3, Fp8Slab};
use crate::kv::q8_slab::{Q8Slab, Q8_BLOCK};
use crate::kv::scaled_slab::{Code, ScaledSlab};

/// One slab of rows. Half types are kept as their bits so a fresh pool is zeroed pages
/// the OS hands out lazily, not gigabytes written at startup ([`KvCache::fault_in_next`]
/// backs them while the engine is idle). Small pages, unlike the
/// weights': every new block's first write faults its pages in, and a 2 MiB page costs
/// that fault plus compaction inside a step (docs/performance.md, "Huge pages").
pub enum KvSlab {
    F32(Vec<f32>),
    F16(Vec<u16>),
    Bf16(Vec<u16>),
    Q8(Q8Slab),
    Fp8(Fp8Slab),
}

impl KvSlab {
    /// `len` zero elements; a quantization block's elements lie `stride` apart (an `fp8`
    /// block is one head's row, `head_dim` values).
    fn zeroed(dtype: KvCacheDtype, len: usize, stride: usize, head_dim: usize) -> Self {
        match dtype.resolve() {
            KvCacheDtype::F32 => Self::F32(vec![0.0; len]),
            KvCacheDtype::Bf16 => Self::Bf16(vec![0; len]),
            KvCacheDtype::Q8_0 => Self::Q8(Q8Slab::zeroed(len, Q8_BLOCK, stride)),
            KvCacheDtype::Fp8 => Self::Fp8(Fp8Slab::zeroed(len, head_dim, stride)),
            _ => Self::F16(vec![0; len]),
        }
    }

    /// Reads and writes back one byte in every page that elements `range` of the slab
    /// touch, so the OS backs them now; the contents do not change.
    fn touch_pages(&mut self, range: Range<usize>) {
        match self {
            Self::F32(s) => touch_bytes(s, range.start * 4..range.end * 4),
            Self::F16(s) | Self::Bf16(s) => touch_bytes(s, range.start * 2..range.end * 2),
            Self::Q8(s) => touch_scaled(s, range),
            Self::Fp8(s) => touch_scaled(s, range),
        }
    }

    /// The slab's arrays as bytes (native order), for copying whole pages to and from a
    /// disk tier without knowing the element type: the elements, and for `q8_0`/`fp8` its scales
    /// (empty otherwise). Each array holds the pages one after another, so a page is the same
    /// fraction of each (a page's elements fill whole quantization blocks).
    fn byte_arrays_mut(&mut self) -> [&mut [u8]; 2] {
        match self {
            Self::F32(s) => [as_bytes_mut(s), &mut []],
            Self::F16(s) | Self::Bf16(s) => [as_bytes_mut(s), &mut []],
            Self::Q8(s) => [as_bytes_mut(&mut s.qs), as_bytes_mut(&mut s.scales)],
            Self::Fp8(s) => [as_bytes_mut(&mut s.qs), as_bytes_mut(&mut s.scales)],
        }
    }

    /// The slab's arrays as bytes, as [`byte_arrays_mut`](Self::byte_arrays_mut) lays them out.
    fn byte_arrays(&self) -> [&[u8]; 2] {
        match self {
            Self::F32(s) => [as_bytes(s), &[]],
            Self::F16(s) | Self::Bf16(s) => [as_bytes(s), &[]],
            Self::Q8(s) => [as_bytes(&s.qs), as_bytes(&s.scales)],
            Self::Fp8(s) => [as_bytes(&s.qs), as_bytes(&s.scales)],
        }
    }

    /// A raw view of the elements, for tasks that each store disjoint ones.
    fn raw(&mut self) -> RawSlab {
        match self {
            Self::F32(s) => RawSlab::F32(s.as_mut_ptr(), s.len()),
            Self::F16(s) => RawSlab::F16(s.as_mut_ptr(), s.len()),
            Self::Bf16(s) => RawSlab::Bf16(s.as_mut_ptr(), s.len()),
            Self::Q8(s) => RawSlab::Q8(RawScaled::of(s)),
            Self::Fp8(s) => RawSlab::Fp8(RawScaled::of(s)),
        }
    }

    /// Elements `start..start + dst.len()` widened to f32 (exact).
    pub fn load(&self, start: usize, dst: &mut [f32]) {
        let end = start + dst.len();
        match self {
            Self::F32(s) => dst.copy_from_slice(&s[start..end]),
            Self::F16(s) => s[start..end]
                .reinterpret_cast::<f16>()
                .convert_to_f32_slice(dst),
            Self::Bf16(s) => s[start..end]
                .reinterpret_cast::<bf16>()
                .convert_to_f32_slice(dst),
            Self::Q8(s) => s.load(start, dst),
            Self::Fp8(s) => s.load(start, dst),
        }
    }
}

/// [`KvSlab::touch_pages`] of a quantized slab: its codes' and its scales' pages.
fn touch_scaled<Q: Code>(s: &mut ScaledSlab<Q>, range: Range<usize>) {
    let (qs, scales) = s.byte_ranges(range);
    touch_bytes(&mut s.qs, qs);
    touch_bytes(&mut s.scales, scales);
}

/// Reads and writes back one byte in every page that bytes `range` of `slab` touch.
fn touch_bytes<T>(slab: &mut [T], range: Range<usize>) {
    let (base, len) = (slab.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(slab));
    let mut at = range.start;
    while at < range.end.min(len) {
        // SAFETY: `at < len` lies inside the slab, which `&mut` holds alone. Volatile, so
        // writing back an unchanged byte is not optimised away.
        unsafe {
            let p = base.add(at);
            p.write_volatile(p.read_volatile());
        }
        at = (at / PAGE_BYTES + 1) * PAGE_BYTES;
    }
}

/// Bytes of pages [`KvCache::fault_in_next`] touches in one call (at least one block's
/// share of a slab): ~0.5–1 ms of page faults where backing 2 GiB took 4–9 s (computed
/// from that), the most a request arriving meanwhile waits for it.
const FAULT_IN_BYTES: usize = 256 << 10;

/// The smallest page size: one touched byte in each backs the page.
const PAGE_BYTES: usize = 4096;

pub struct KvCache {
    block_size: usize,
    /// `num_kv_heads * head_dim`
    width: usize,
    dtype: KvCacheDtype,
    /// One pair of slabs per layer of a group.
    slabs: Vec<KvLayer>,
    groups: KvCacheGroups,
    /// Where [`fault_in_next`](Self::fault_in_next) goes on: (first block, slab) not yet
    /// touched; slab `2j` is slab pair `j`'s keys, `2j + 1` its values.
    faulted: (usize, usize),
    num_blocks: usize,
}

/// The pool's size and element layout.
#[derive(Debug, Clone, Copy)]
pub struct KvShape {
    pub num_blocks: usize,
    pub block_size: usize,
    pub heads: KvHeads,
    pub dtype: KvCacheDtype,
}

pub struct KvLayer {
    /// `[num_blocks, width, block_size]`: transposed within each block.
    pub keys: KvSlab,
    /// `[num_blocks, num_kv_heads, block_size, head_dim]`: head-major within each block.
    pub values: KvSlab,
    block_size: usize,
    width: usize,
    head_dim: usize,
}

impl KvLayer {
    /// Element index of slot `slot`'s key element 0; element `e` is `block_size · e` further.
    pub fn key_start(&self, slot: usize) -> usize {
        let (block, offset) = (slot / self.block_size, slot % self.block_size);
        block * self.block_size * self.width + offset
    }

    /// Slot `slot`'s key for every KV head (`[width]`), widened to f32.
    pub fn key_row(&self, slot: usize, dst: &mut [f32]) {
        let start = self.key_start(slot);
        for (e, d) in dst.iter_mut().enumerate() {
            let mut one = [0.0];
            self.keys.load(start + e * self.block_size, &mut one);
            *d = one[0];
        }
    }

    /// Element index of slot `slot`'s value element `e`; elements `e..` of its KV head
    /// (up to the next multiple of `head_dim`) follow it contiguously.
    pub fn value_start(&self, slot: usize, e: usize) -> usize {
        let (block, offset) = (slot / self.block_size, slot % self.block_size);
        let (head, dim) = (e / self.head_dim, e % self.head_dim);
        block * self.block_size * self.width
            + (head * self.block_size + offset) * self.head_dim
            + dim
    }

    /// Slot `slot`'s value for every KV head (`[width]`), widened to f32.
    pub fn value_row(&self, slot: usize, dst: &mut [f32]) {
        for (head, dst) in dst.chunks_mut(self.head_dim).enumerate() {
            self.values
                .load(self.value_start(slot, head * self.head_dim), dst);
        }
    }
}

impl KvCache {
    /// A cache of one group of `num_layers` layers: a slab pair per layer.
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        heads: KvHeads,
        dtype: KvCacheDtype,
    ) -> Self {
        let shape = KvShape {
            num_blocks,
            block_size,
            heads,
            dtype,
        };
        Self::with_groups(KvCacheGroups::single(num_layers), shape)
    }

    /// A cache of `shape.num_blocks` pages shared by every group of `groups`.
    pub fn with_groups(groups: KvCacheGroups, shape: KvShape) -> Self {
        let KvShape {
            num_blocks,
            block_size,
            heads,
            dtype,
        } = shape;
        let (width, head_dim) = (heads.width(), heads.head_dim);
        let slab = num_blocks * block_size * width;
        let slabs = (0..groups.group_size())
            .map(|_| KvLayer {
                keys: KvSlab::zeroed(dtype, slab, block_size, head_dim),
                values: KvSlab::zeroed(dtype, slab, 1, head_dim),
                block_size,
                width,
                head_dim,
            })
            .collect();
        Self {
            block_size,
            width,
            dtype: dtype.resolve(),
            slabs,
            groups,
            faulted: (0, 0),
            num_blocks,
        }
    }

    /// Touches the pages of the next slab's share of the next blocks not yet touched, about
    /// [`FAULT_IN_BYTES`], lowest blocks first (the order a fresh block manager hands
    /// them out) and every layer's slabs before the next blocks; `false` once the whole
    /// pool has been touched. The OS backs a fresh mapping only as it is first written, so
    /// otherwise a block's first use pays its page faults inside a step, and a fresh server's
    /// first run is slower than the runs after it, which reuse the same pages
    /// (docs/performance.md, "A fresh server's page faults"). The engine thread
    /// calls this while it has no work: each byte touched is read and written back
    /// unchanged, so blocks that hold data (cached prefixes) keep it.
    pub fn fault_in_next(&mut self) -> bool {
        let block_elements = self.block_size * self.width;
        let head_dim = self.slabs.first().map_or(1, |l| l.head_dim);
        let block_bytes = self.dtype.bytes_for(block_elements, head_dim);
        let per_call = (FAULT_IN_BYTES / block_bytes.max(1)).max(1);
        let (block, slab) = self.faulted;
        if block >= self.num_blocks {
            return false;
        }
        let end = (block + per_call).min(self.num_blocks);
        let layer = &mut self.slabs[slab / 2];
        let target = if slab % 2 == 0 {
            &mut layer.keys
        } else {
            &mut layer.values
        };
        target.touch_pages(block * block_elements..end * block_elements);
        self.faulted = if slab + 1 < 2 * self.slabs.len() {
            (block, slab + 1)
        } else {
            (end, 0)
        };
        self.faulted.0 < self.num_blocks
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The concrete element type (never `Auto`).
    pub fn dtype(&self) -> KvCacheDtype {
        self.dtype
    }

    pub fn groups(&self) -> &KvCacheGroups {
        &self.groups
    }

    /// Layer `layer`'s slabs (read through its group's block tables).
    pub fn layer(&self, layer: usize) -> &KvLayer {
        &self.slabs[self.groups.slab_of(layer)]
    }

    /// Bytes one page takes over every slab (each layer's keys and values), whatever the
    /// element type: what the disk tier stores per block.
    pub fn page_bytes(&self) -> usize {
        let blocks = self.num_blocks.max(1);
        let slab = |s: &KvSlab| {
            s.byte_arrays()
                .iter()
                .map(|a| a.len() / blocks)
                .sum::<usize>()
        };
        self.slabs
            .iter()
            .map(|l| slab(&l.keys) + slab(&l.values))
            .sum()
    }

    /// Appends page `block`'s bytes of every slab, keys then values, layer by layer (each
    /// slab's arrays in turn), to `dst`.
    pub fn copy_page_out(&self, block: usize, dst: &mut Vec<u8>) {
        for layer in &self.slabs {
            for slab in [&layer.keys, &layer.values] {
                for array in slab.byte_arrays() {
                    let page = array.len() / self.num_blocks;
                    dst.extend_from_slice(&array[block * page..(block + 1) * page]);
                }
            }
        }
    }

    /// Writes page `block` of every slab from `src`, as [`copy_page_out`](Self::copy_page_out)
    /// laid it out; `false`, and nothing written, when `src` is not one page long.
    pub fn copy_page_in(&mut self, block: usize, src: &[u8]) -> bool {
        if src.len() != self.page_bytes() || block >= self.num_blocks {
            return false;
        }
        let mut at = 0;
        let num_blocks = self.num_blocks;
        for layer in &mut self.slabs {
            for slab in [&mut layer.keys, &mut layer.values] {
                for array in slab.byte_arrays_mut() {
                    let page = array.len() / num_blocks;
                    array[block * page..(block + 1) * page].copy_from_slice(&src[at..at + page]);
                    at += page;
                }
            }
        }
        true
    }

    /// Stores layer `layer`'s rows of `keys`/`values` (`[T, width]`, f32) at `slots[T]`
    /// (slots of its group's tables), rounding to the cache's type. A large write (a prefill chunk) runs on the compute pool, each task
    /// storing a range of elements for every row: rows of one block then fill each key
    /// line's positions in turn while it is in cache, and the tasks' elements are disjoint.
    pub fn write(&mut self, layer: usize, slots: &[usize], keys: &[f32], values: &[f32]) {
        let (w, bs) = (self.width, self.block_size);
        assert!(keys.len() == slots.len() * w && values.len() == slots.len() * w);
        let layer = &mut self.slabs[self.groups.slab_of(layer)];
        let (key_slab, value_slab) = (layer.keys.raw(), layer.values.raw());
        let (layer, hd) = (&*layer, layer.head_dim);
        let key_at = |slot: usize, col: usize| layer.key_start(slot) + col * bs;
        let store = |cols: Range<usize>| {
            for (row, &slot) in slots.iter().enumerate() {
                // A decode row's key lines were last touched a step ago: ask for the next
                // row's while this one stores.
                if let Some(&next) = slots.get(row + 1) {
                    key_slab.prefetch(key_at(next, cols.start), bs, cols.len());
                }
                // The source rows lie a whole row apart, a page or more, where the hardware
                // prefetcher does not follow: ask for them two rows ahead.
                if row + SOURCE_AHEAD < slots.len() {
                    let ahead = (row + SOURCE_AHEAD) * w + cols.start;
                    prefetch_source(&keys[ahead..ahead + cols.len()]);
                    prefetch_source(&values[ahead..ahead + cols.len()]);
                }
                let src = row * w + cols.start..row * w + cols.end;
                let key = key_at(slot, cols.start);
                // SAFETY: element `e` of slot `s`'s key is `key_start(s) + e·bs` and of
                // its value `value_start(s, e)`: distinct for distinct (slot, e), so tasks
                // that take distinct element ranges write distinct elements; `store`
                // bounds them.
                unsafe { key_slab.store(key, bs, &keys[src]) };
                // The value in runs that end at each KV head's end (contiguous within it).
                let mut col = cols.start;
                while col < cols.end {
                    let end = ((col / hd + 1) * hd).min(cols.end);
                    let value = &values[row * w + col..row * w + end];
                    // SAFETY: as above.
                    unsafe { value_slab.store(layer.value_start(slot, col), 1, value) };
                    col = end;
                }
            }
        };
        // An `fp8` block is a head's row: each task takes whole heads.
        let columns = if self.dtype == KvCacheDtype::Fp8 {
            (WRITE_COLUMNS / hd).max(1) * hd
        } else {
            WRITE_COLUMNS
        };
        if slots.len() * w >= PARALLEL_WRITE && w > columns {
            ComputePool::global().for_each_range(w, columns, store);
        } else {
            for start in (0..w).step_by(columns) {
                store(start..(start + columns).min(w));
            }
        }
    }
}

/// Rows ahead of the one being stored whose source elements a write prefetches.
const SOURCE_AHEAD: usize = 2;

/// Asks for the cache lines of `src`.
#[inline(always)]
fn prefetch_source(src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in src.chunks(16) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr() as *const i8) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = src;
}

/// `src` rounded to f16 bits (to nearest, ties to even) in `dst`. On x86 with F16C eight
/// at a time in `vcvtps2ph`, inlined here: `half`'s slice conversion makes the same bits but
/// checks the CPU and calls out of line for every eight values, 3% of a 2,048-token
/// Qwen3-0.6B prefill (`perf`).
fn round_to_f16(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU has F16C (checked just above).
        unsafe { round_to_f16_f16c(src, dst) };
        return;
    }
    dst.reinterpret_cast_mut::<f16>()
        .convert_from_f32_slice(src);
}

/// [`round_to_f16`] with F16C; the tail past a multiple of eight through `half`.
///
/// # Safety
/// The CPU must have F16C (and so AVX).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn round_to_f16_f16c(src: &[f32], dst: &mut [u16]) {
    use std::arch::x86_64::*;
    let whole = src.len() / 8 * 8;
    for (s, d) in src[..whole].chunks_exact(8).zip(dst.chunks_exact_mut(8)) {
        // SAFETY: `s` and `d` hold eight elements each; the loads and stores are unaligned.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s.as_ptr()));
            _mm_storeu_si128(d.as_mut_ptr() as *mut __m128i, h);
        }
    }
    dst[whole..]
        .reinterpret_cast_mut::<f16>()
        .convert_from_f32_slice(&src[whole..]);
}

/// Key and value elements of a write below which it stays on the calling thread. Decode
/// rows' keys miss the cache (each scatters over a block's lines, last touched a step
/// ago), so even a few rows are worth two threads: a 16-row Qwen3-0.6B step spent ~60 µs
/// a layer writing its KV on one.
const PARALLEL_WRITE: usize = 8 * 1024;
/// Elements of each row one write task stores (rounded to whole heads for `fp8`).
const WRITE_COLUMNS: usize = 128;

/// A slab's elements as a raw pointer and length, shared by tasks that store disjoint
/// elements (`KvCache::write`).
#[derive(Clone, Copy)]
enum RawSlab {
    F32(*mut f32, usize),
    F16(*mut u16, usize),
    Bf16(*mut u16, usize),
    Q8(RawScaled<i8>),
    Fp8(RawScaled<E4m3>),
}

/// A quantized slab's codes (`len` of them) and scales as raw pointers, with its block
/// length and a block's element stride.
struct RawScaled<Q> {
    qs: *mut Q,
    scales: *mut u16,
    len: usize,
    block: usize,
    stride: usize,
}

// Copy whatever `Q` is (a derive would ask `Q: Copy`, which the pointers do not need).
impl<Q> Clone for RawScaled<Q> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Q> Copy for RawScaled<Q> {}

impl<Q: Code> RawScaled<Q> {
    fn of(s: &mut ScaledSlab<Q>) -> Self {
        Self {
            qs: s.qs.as_mut_ptr(),
            scales: s.scales.as_mut_ptr(),
            len: s.qs.len(),
            block: s.block,
            stride: s.stride,
        }
    }

    /// Quantizes `src`, whole blocks from the start of one, into elements `start`, `start
    /// + stride`, … (`stride` the slab's block stride), and their blocks' scales.
    ///
    /// # Safety
    /// As [`RawSlab::store`].
    unsafe fn store(self, start: usize, stride: usize, src: &[f32]) {
        let (n, block) = (src.len(), self.block);
        let span = block * self.stride;
        assert!(stride == self.stride && n.is_multiple_of(block));
        assert!(start % span < self.stride && start + (n - 1) * stride < self.len);
        for (b, values) in src.chunks_exact(block).enumerate() {
            let first = start + b * span;
            // SAFETY: in bounds (asserted, and the scales are `len / block`); exclusive by
            // the caller's contract.
            unsafe {
                let scale = Q::quantize(values, |j, q| *self.qs.add(first + j * stride) = q);
                *self
                    .scales
                    .add(first / span * self.stride + first % self.stride) = scale;
            }
        }
    }
}

// SAFETY: a `RawSlab` is only stored through, by tasks whose elements are disjoint
// (`store`'s contract), while the slab's `&mut` borrow that made it is held.
unsafe impl Send for RawSlab {}
// SAFETY: as above.
unsafe impl Sync for RawSlab {}

impl RawSlab {
    /// Prefetches the lines of elements `start`, `start + stride`, … (`n` of them).
    fn prefetch(self, start: usize, stride: usize, n: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let (base, size) = match self {
                Self::F32(p, _) => (p as *const i8, 4),
                Self::F16(p, _) | Self::Bf16(p, _) => (p as *const i8, 2),
                Self::Q8(s) => (s.qs as *const i8, 1),
                Self::Fp8(s) => (s.qs as *const i8, 1),
            };
            let step = (64 / (stride * size)).max(1);
            for j in (0..n).step_by(step) {
                let at = base.wrapping_add((start + j * stride) * size);
                // SAFETY: a prefetch reads nothing architecturally and never faults.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(at) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (self, start, stride, n);
    }

    /// Rounds `src` into elements `start`, `start + stride`, … (one per element of `src`;
    /// at most [`WRITE_COLUMNS`] of them for a half type). A quantized slab takes whole
    /// quantization blocks: `src` a multiple of its block length starting a block, at its
    /// `stride`.
    ///
    /// # Safety
    /// No other thread reads or writes those elements (or their blocks' scales) meanwhile.
    unsafe fn store(self, start: usize, stride: usize, src: &[f32]) {
        let n = src.len();
        let Some(last) = n.checked_sub(1) else {
            return;
        };
        let mut bits = [0u16; WRITE_COLUMNS];
        let (ptr, len) = match self {
            Self::F32(p, len) => {
                assert!(start + last * stride < len);
                for (j, &x) in src.iter().enumerate() {
                    // SAFETY: in bounds (asserted); exclusive by the caller's contract.
                    unsafe { *p.add(start + j * stride) = x };
                }
                return;
            }
            Self::F16(p, len) => {
                assert!(n <= WRITE_COLUMNS);
                round_to_f16(src, &mut bits[..n]);
                (p, len)
            }
            Self::Bf16(p, len) => {
                assert!(n <= WRITE_COLUMNS);
                bits[..n]
                    .reinterpret_cast_mut::<bf16>()
                    .convert_from_f32_slice(src);
                (p, len)
            }
            // SAFETY (both): the caller's contract.
            Self::Q8(s) => return unsafe { s.store(start, stride, src) },
            Self::Fp8(s) => return unsafe { s.store(start, stride, src) },
        };
        assert!(start + last * stride < len);
        for (j, &b) in bits[..n].iter().enumerate() {
            // SAFETY: in bounds (asserted); exclusive by the caller's contract.
            unsafe { *ptr.add(start + j * stride) = b };
        }
    }
}

/// The slabs' element types: no padding, and every byte pattern a valid value.
trait PlainNumber: Copy {}
impl PlainNumber for f32 {}
impl PlainNumber for u16 {}
impl PlainNumber for i8 {}
impl PlainNumber for E4m3 {}

/// A slice of plain numbers as its bytes (native order).
fn as_bytes<T: PlainNumber>(s: &[T]) -> &[u8] {
    // SAFETY: the element types here (f32, u16, i8, E4m3: a `u8`) have no padding and any
    // byte is valid for u8, which has no alignment needs; the view borrows `s` for its lifetime.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), size_of_val(s)) }
}

/// A mutable slice of plain numbers as its bytes (native order).
fn as_bytes_mut<T: PlainNumber>(s: &mut [T]) -> &mut [u8] {
    let len = size_of_val(s);
    // SAFETY: as for `as_bytes`, and every byte pattern is a valid f32, u16, i8 or E4m3, so
    // writing any bytes leaves valid elements.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), len) }
}
