//! Batched, batch-invariant Q8_0 matrix multiply for CPUs without AVX-512/VNNI.
//!
//! candle's Q8_0 fallback computes one activation row at a time, so a prefill chunk pays
//! the full weight traffic once per token. This kernel quantizes every activation row to
//! Q8_0 up front and multiplies tiles of up to [`MR`] activation rows by [`NR`] weight
//! rows, so each loaded block is reused across the tile.
//!
//! Batch invariance: every output element is produced by the same sequence of float
//! operations whatever `m` is and wherever the element falls in a tile. Per 32-wide
//! block the integer dot product is split into its first and second 16 lanes (both exact
//! in i32 and in f32), each half is fused-multiply-added with `d_w * d_x` into its own
//! accumulator in ascending block order, and the two accumulators are added at the end.
//! Tiles only change which elements are computed together, never that sequence; `k` is
//! never split across threads. The portable kernel follows the same sequence with
//! `f32::mul_add`, so it is bitwise equal to the AVX2 one.

use rayon::prelude::*;
use std::marker::PhantomData;
use std::ops::Range;

/// Elements per quantization block (one scale each), as in ggml's Q8_0.
pub const BLOCK: usize = 32;
/// Weight rows (output columns) per tile; the weights are stored interleaved by this.
pub const NR: usize = 4;
/// Activation rows per tile at most.
pub const MR: usize = 4;

/// Bytes of one interleaved group-block: `NR` weight rows × one 32-element block.
const GROUP_BLOCK: usize = NR * BLOCK;
/// Below this many multiply-adds, a rayon fork costs more than it saves.
const MIN_PARALLEL_MACS: usize = 1 << 19;
/// Weight bytes per parallel task at most, so a task's weights stay in L2 while every
/// activation tile streams past them.
const TASK_WEIGHT_BYTES: usize = 192 * 1024;

/// Q8_0 weight matrix of `rows` (out_features) × `cols` (in_features), stored as groups
/// of [`NR`] rows whose blocks are interleaved so a tile reads them contiguously.
#[derive(Debug, Clone)]
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    /// `[group][block][row in group][32]`; rows past `rows` in the last group are zero.
    quants: Vec<i8>,
    /// `[group][block][row in group]`, matching `quants`.
    scales: Vec<f32>,
}

/// Activations quantized per row: `quants[m][k]`, `scales[m][k / 32]`.
struct Q8Rows {
    m: usize,
    k: usize,
    quants: Vec<i8>,
    /// `|quants|`, kept so the SIMD kernel need not recompute it for every weight group.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    abs: Vec<i8>,
    scales: Vec<f32>,
}

/// One quantized activation row, as the tile kernels read it.
#[derive(Clone, Copy)]
struct XRow<'a> {
    quants: &'a [i8],
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    abs: &'a [i8],
    scales: &'a [f32],
}

impl Q8Rows {
    fn row(&self, r: usize) -> XRow<'_> {
        let (k, b) = (self.k, self.k / BLOCK);
        XRow {
            quants: &self.quants[r * k..(r + 1) * k],
            abs: &self.abs[r * k..(r + 1) * k],
            scales: &self.scales[r * b..(r + 1) * b],
        }
    }
}

impl Q8Matrix {
    /// From row-major f32 weights `[n, k]`. `None` when `k` is not a multiple of 32 or
    /// `weights` is not `n * k` long, so the caller can fall back to another kernel.
    pub fn quantize(weights: &[f32], n: usize, k: usize) -> Option<Self> {
        if !k.is_multiple_of(BLOCK) || n.checked_mul(k)? != weights.len() {
            return None;
        }
        let blocks = k / BLOCK;
        let groups = n.div_ceil(NR);
        let kernel = Kernel::detect();
        let mut quants = vec![0i8; groups * blocks * GROUP_BLOCK];
        let mut scales = vec![0f32; groups * blocks * NR];
        for (row, w) in weights.chunks_exact(k.max(1)).take(n).enumerate() {
            let (g, r) = (row / NR, row % NR);
            for (b, src) in w.chunks_exact(BLOCK).enumerate() {
                let at = (g * blocks + b) * NR + r;
                let dst = &mut quants[at * BLOCK..(at + 1) * BLOCK];
                scales[at] = kernel.quantize_block(src.try_into().ok()?, dst.try_into().ok()?);
            }
        }
        Some(Self {
            rows: n,
            cols: k,
            quants,
            scales,
        })
    }

    /// Output features (`n`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (`k`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `y[m, n] = x[m, k] · Wᵀ`, with `x` row-major. Each activation row is quantized to
    /// Q8_0 (scale = amax/127, round half away from zero), block dot products are exact
    /// integers, scaled by `d_w * d_x` and accumulated in f32. Row `r` of the result is
    /// bitwise independent of `m` and of the other rows.
    ///
    /// # Panics
    /// If `x.len() != m * self.cols()`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.matmul_with(x, m, Kernel::detect())
    }

    /// [`matmul`](Self::matmul) with the portable kernel forced. It is bitwise equal to the
    /// SIMD kernel; exposed so tests and benchmarks can check and compare both.
    ///
    /// # Panics
    /// If `x.len() != m * self.cols()`.
    pub fn matmul_portable(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.matmul_with(x, m, Kernel::Portable)
    }

    fn matmul_with(&self, x: &[f32], m: usize, kernel: Kernel) -> Vec<f32> {
        assert_eq!(x.len(), m * self.cols, "Q8Matrix::matmul: x is not [m, k]");
        let (n, k) = (self.rows, self.cols);
        if m == 0 || n == 0 {
            return vec![0.0; m * n];
        }
        let act = quantize_rows(x, m, k, kernel);
        let mut y = vec![0f32; m * n];
        let out = ColumnWriter::new(&mut y, m, n);
        let task_cols = self.task_cols(m);
        let run = |t: usize| {
            let cols = t * task_cols..((t + 1) * task_cols).min(n);
            // SAFETY: task `t` alone writes columns `cols`; tasks partition `0..n`.
            unsafe { self.task(&act, cols, &out, kernel) }
        };
        let tasks = n.div_ceil(task_cols);
        if m * n * k < MIN_PARALLEL_MACS {
            (0..tasks).for_each(run);
        } else {
            (0..tasks).into_par_iter().for_each(run);
        }
        y
    }

    /// Output columns per parallel task: a multiple of [`NR`], small enough that the
    /// threads get several tasks each (balance) and a task's weights fit in L2.
    fn task_cols(&self, m: usize) -> usize {
        let threads = rayon::current_num_threads().max(1);
        let groups = self.rows.div_ceil(NR);
        let per_balance = groups.div_ceil(threads * 4);
        let per_cache = (TASK_WEIGHT_BYTES / (self.cols.max(1) * NR)).max(1);
        // One activation row has nothing to reuse, so only balance and cache matter; larger
        // batches want wider tasks to amortize re-reading the activations.
        let want = if m == 1 {
            per_balance
        } else {
            per_balance.max(2)
        };
        want.min(per_cache).max(1) * NR
    }

    /// Computes output columns `cols` (starting at a multiple of [`NR`]) for every row.
    ///
    /// # Safety
    /// No other thread may access columns `cols` of `out` meanwhile.
    unsafe fn task(
        &self,
        act: &Q8Rows,
        cols: Range<usize>,
        out: &ColumnWriter<'_>,
        kernel: Kernel,
    ) {
        let blocks = self.cols / BLOCK;
        for i0 in (0..act.m).step_by(MR) {
            let mr = (act.m - i0).min(MR);
            for c in cols.clone().step_by(NR) {
                let g = c / NR;
                let w = &self.quants[g * blocks * GROUP_BLOCK..(g + 1) * blocks * GROUP_BLOCK];
                let ws = &self.scales[g * blocks * NR..(g + 1) * blocks * NR];
                let tile = kernel.tile(w, ws, act, i0, mr);
                let width = (cols.end - c).min(NR);
                for (i, row) in tile.iter().take(mr).enumerate() {
                    // SAFETY: these columns belong to this task (caller's contract).
                    unsafe { out.write(i0 + i, c, &row[..width]) };
                }
            }
        }
    }
}

/// Row-major `[m, n]` output that parallel tasks fill, each owning a disjoint column
/// range, so no task needs a private buffer that would later be copied into place.
struct ColumnWriter<'a> {
    ptr: *mut f32,
    m: usize,
    n: usize,
    /// Holds the mutable borrow of the output, so nothing else can touch it meanwhile.
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: `write`'s contract makes concurrent writers touch disjoint elements.
unsafe impl Sync for ColumnWriter<'_> {}

impl<'a> ColumnWriter<'a> {
    fn new(y: &'a mut [f32], m: usize, n: usize) -> Self {
        assert_eq!(y.len(), m * n);
        Self {
            ptr: y.as_mut_ptr(),
            m,
            n,
            _out: PhantomData,
        }
    }

    /// Stores `vals` at `[row, col..col + vals.len()]`.
    ///
    /// # Safety
    /// No other thread may access those elements concurrently.
    unsafe fn write(&self, row: usize, col: usize, vals: &[f32]) {
        assert!(row < self.m && col + vals.len() <= self.n);
        // SAFETY: in bounds by the assert; exclusive by the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(
                vals.as_ptr(),
                self.ptr.add(row * self.n + col),
                vals.len(),
            )
        };
    }
}

/// Quantizes one 32-element block into `dst` and returns its scale (amax/127). Rounds
/// half away from zero, like C's `roundf`.
fn quantize_block(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> f32 {
    let amax = src.iter().fold(0f32, |a, v| a.max(v.abs()));
    let (d, id) = scale_and_inverse(amax);
    for (q, v) in dst.iter_mut().zip(src) {
        // -128 is excluded: it would let maddubs pairs saturate i16.
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    d
}

/// The block scale and the multiplier that maps the block onto [-127, 127].
fn scale_and_inverse(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

fn quantize_rows(x: &[f32], m: usize, k: usize, kernel: Kernel) -> Q8Rows {
    let mut quants = vec![0i8; m * k];
    let mut scales = vec![0f32; m * k / BLOCK];
    for ((src, dst), d) in x
        .chunks_exact(BLOCK)
        .zip(quants.chunks_exact_mut(BLOCK))
        .zip(scales.iter_mut())
    {
        if let (Ok(src), Ok(dst)) = (src.try_into(), dst.try_into()) {
            *d = kernel.quantize_block(src, dst);
        }
    }
    // Cannot overflow: quantization never produces -128.
    let abs = quants.iter().map(|q| q.abs()).collect();
    Q8Rows {
        m,
        k,
        quants,
        abs,
        scales,
    }
}

/// Which tile implementation runs; chosen once per call from the running CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

/// One tile's result: `[activation row][weight row in group]`.
type Tile = [[f32; NR]; MR];

impl Kernel {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Kernel::Avx2;
        }
        Kernel::Portable
    }

    /// Both implementations produce the same bits: max, one multiply and an exact
    /// round-half-away-from-zero per element.
    fn quantize_block(self, src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> f32 {
        match self {
            Kernel::Portable => quantize_block(src, dst),
            // SAFETY: `detect` only picks Avx2 when the CPU has AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { avx2::quantize_block(src, dst) },
        }
    }

    /// Multiplies activation rows `i0..i0 + mr` by one weight group (`w`, `ws`).
    fn tile(self, w: &[i8], ws: &[f32], act: &Q8Rows, i0: usize, mr: usize) -> Tile {
        // Rows past `mr` repeat the last one; the kernels ignore them.
        let x: [XRow; MR] = std::array::from_fn(|i| act.row(i0 + i.min(mr - 1)));
        match self {
            Kernel::Portable => {
                let mut out = [[0f32; NR]; MR];
                for (o, row) in out.iter_mut().zip(&x).take(mr) {
                    *o = portable::row(w, ws, row.quants, row.scales);
                }
                out
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `detect` only picks Avx2 when the CPU has AVX2 and FMA.
            Kernel::Avx2 => unsafe {
                match mr {
                    1 => avx2::tile::<1>(w, ws, &x),
                    2 => avx2::tile::<2>(w, ws, &x),
                    3 => avx2::tile::<3>(w, ws, &x),
                    _ => avx2::tile::<4>(w, ws, &x),
                }
            },
        }
    }
}

mod portable {
    use super::{BLOCK, GROUP_BLOCK, NR};

    /// One activation row against one weight group, in the shared per-element sequence.
    pub(super) fn row(w: &[i8], ws: &[f32], xq: &[i8], xs: &[f32]) -> [f32; NR] {
        let mut lo = [0f32; NR];
        let mut hi = [0f32; NR];
        for (b, (xb, dx)) in xq.chunks_exact(BLOCK).zip(xs).enumerate() {
            let wg = &w[b * GROUP_BLOCK..(b + 1) * GROUP_BLOCK];
            for (j, wb) in wg.chunks_exact(BLOCK).enumerate() {
                let s = dx * ws[b * NR + j];
                let (l, h) = half_dots(wb, xb);
                lo[j] = (l as f32).mul_add(s, lo[j]);
                hi[j] = (h as f32).mul_add(s, hi[j]);
            }
        }
        std::array::from_fn(|j| lo[j] + hi[j])
    }

    /// Integer dot products of the first and second 16 elements of a block.
    fn half_dots(w: &[i8], x: &[i8]) -> (i32, i32) {
        let dot = |a: &[i8], b: &[i8]| -> i32 {
            a.iter().zip(b).map(|(&p, &q)| p as i32 * q as i32).sum()
        };
        let h = BLOCK / 2;
        (dot(&w[..h], &x[..h]), dot(&w[h..], &x[h..]))
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{scale_and_inverse, Tile, XRow, BLOCK, GROUP_BLOCK, MR, NR};
    use std::arch::x86_64::*;

    /// Vectorized [`super::quantize_block`], bit for bit: `f32::round` is a libm call on
    /// baseline x86-64, which would cost more than the matmul for small `n`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_block(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> f32 {
        let p = src.as_ptr();
        // SAFETY: `src` holds 32 f32s, four unaligned 8-wide loads.
        let v = unsafe {
            [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ]
        };
        let m = _mm256_max_ps(
            _mm256_max_ps(abs(v[0]), abs(v[1])),
            _mm256_max_ps(abs(v[2]), abs(v[3])),
        );
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2)));
        let (d, id) = scale_and_inverse(amax);
        let id = _mm256_set1_ps(id);
        let q = [
            to_i32(v[0], id),
            to_i32(v[1], id),
            to_i32(v[2], id),
            to_i32(v[3], id),
        ];
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        // The packs work within 128-bit lanes; this puts the 4-byte groups back in order.
        let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: `dst` is 32 bytes; storeu has no alignment requirement.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, ordered) };
        d
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn abs(v: __m256) -> __m256 {
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
    }

    /// `round(v * id)` clamped to [-127, 127], half away from zero like `f32::round`:
    /// truncate, then step away from zero when the (exact) dropped fraction is ≥ 0.5.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn to_i32(v: __m256, id: __m256) -> __m256i {
        let y = _mm256_mul_ps(v, id);
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
        let away = _mm256_cmp_ps::<_CMP_GE_OQ>(abs(_mm256_sub_ps(y, t)), _mm256_set1_ps(0.5));
        let unit = _mm256_or_ps(_mm256_and_ps(y, _mm256_set1_ps(-0.0)), _mm256_set1_ps(1.0));
        let r = _mm256_add_ps(t, _mm256_and_ps(away, unit));
        let r = _mm256_min_ps(
            _mm256_max_ps(r, _mm256_set1_ps(-127.0)),
            _mm256_set1_ps(127.0),
        );
        _mm256_cvttps_epi32(r)
    }

    /// `R` activation rows (`x[..R]`, each over the full `k`) against one weight group.
    /// Lane `j` of a row's accumulator holds the first-half sum of weight row `j`, lane
    /// `j + 4` the second half; see the module doc for why.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile<const R: usize>(w: &[i8], ws: &[f32], x: &[XRow; MR]) -> Tile {
        let blocks = ws.len() / NR;
        assert!(w.len() >= blocks * GROUP_BLOCK);
        for row in &x[..R] {
            let len = blocks * BLOCK;
            assert!(row.quants.len() >= len && row.abs.len() >= len && row.scales.len() >= blocks);
        }
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..blocks {
            // SAFETY: the asserts above keep every 32-byte load and scale read in bounds.
            unsafe {
                let wp = w.as_ptr().add(b * GROUP_BLOCK) as *const __m256i;
                let wv = [
                    _mm256_loadu_si256(wp),
                    _mm256_loadu_si256(wp.add(1)),
                    _mm256_loadu_si256(wp.add(2)),
                    _mm256_loadu_si256(wp.add(3)),
                ];
                let dw = _mm256_broadcast_ps(&*(ws.as_ptr().add(b * NR) as *const __m128));
                for r in 0..R {
                    let xq =
                        _mm256_loadu_si256(x[r].quants.as_ptr().add(b * BLOCK) as *const __m256i);
                    let xa = _mm256_loadu_si256(x[r].abs.as_ptr().add(b * BLOCK) as *const __m256i);
                    let halves = group_halves(&wv, xq, xa);
                    let s = _mm256_mul_ps(_mm256_broadcast_ss(&*x[r].scales.as_ptr().add(b)), dw);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(halves), s, acc[r]);
                }
            }
        }
        let mut out = [[0f32; NR]; MR];
        for (o, a) in out.iter_mut().zip(acc) {
            let mut lanes = [0f32; 8];
            // SAFETY: `lanes` is 8 f32s; storeu has no alignment requirement.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
            *o = std::array::from_fn(|j| lanes[j] + lanes[j + NR]);
        }
        out
    }

    /// Exact integer dots of one activation block (`x`, `|x|`) with the group's four
    /// weight blocks, packed as `[first halves of rows 0..4, second halves of rows 0..4]`.
    /// Interleave-and-add rather than `hadd`, which is microcoded as several uops on AMD;
    /// integer sums are exact, so the grouping does not affect the result.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn group_halves(w: &[__m256i; NR], x: __m256i, xabs: __m256i) -> __m256i {
        let d = [
            block_dot(w[0], x, xabs),
            block_dot(w[1], x, xabs),
            block_dot(w[2], x, xabs),
            block_dot(w[3], x, xabs),
        ];
        // [d0 l0+l2, d1 l0+l2, d0 l1+l3, d1 l1+l3] in each 128-bit half; likewise d2, d3.
        let s01 = _mm256_add_epi32(
            _mm256_unpacklo_epi32(d[0], d[1]),
            _mm256_unpackhi_epi32(d[0], d[1]),
        );
        let s23 = _mm256_add_epi32(
            _mm256_unpacklo_epi32(d[2], d[3]),
            _mm256_unpackhi_epi32(d[2], d[3]),
        );
        _mm256_add_epi32(
            _mm256_unpacklo_epi64(s01, s23),
            _mm256_unpackhi_epi64(s01, s23),
        )
    }

    /// Eight i32 partial sums of `w · x` over one block, lane `l` covering bytes
    /// `4l..4l + 4`. maddubs needs an unsigned side, so `|x|` pairs with `w` signed by `x`;
    /// with both sides in [-127, 127] its i16 pair sums cannot saturate.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn block_dot(w: __m256i, x: __m256i, xabs: __m256i) -> __m256i {
        let pairs = _mm256_maddubs_epi16(xabs, _mm256_sign_epi8(w, x));
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }
}
