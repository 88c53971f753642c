//! Building blocks shared by every model: linear layers, RMSNorm, rotary embeddings.
//!
//! Activations are plain row-major `f32` slices `[rows, width]`; only matmuls go through
//! candle, so the rest of the forward pass reads as ordinary loops.

use crate::config::model_config::{ModelConfig, RopeStyle};
use crate::config::WeightMode;
use crate::error::Result;
use crate::kernels::compute_pool::ComputePool;
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kernels::dense_matrix::DenseMatrix;
use crate::kernels::exp::exp;
use crate::kernels::quant::{Input, QuantMatrix, QuantizedActivations, RowNorm, WeightFormat};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::sync::Arc;

/// `y = x · Wᵀ` with `W` of shape `[out, in]`.
pub struct Linear {
    weight: Weight,
    in_features: usize,
    out_features: usize,
}

enum Weight {
    /// Our batched kernels, on the file's own bits (Q4_0/Q4_1/Q8_0, Q4K/Q5K/Q6K), or on
    /// Q8_0 for other quantized formats or widths the native kernel does not take.
    Quant(Arc<QuantMatrix>),
    /// Stacked projections in different native formats, one matrix each in its own bits:
    /// Q4_K_M files keep some layers' V (of Q/K/V) in Q6K beside Q and K in Q4K.
    QuantParts(Vec<QuantMatrix>),
    /// Dense f32 weights (the exact path, and widths the quantized kernels do not take).
    Dense(DenseMatrix),
}

impl Linear {
    pub fn new(weight: QTensor, mode: WeightMode) -> Result<Self> {
        Self::stacked(&[weight], mode)
    }

    /// Several projections of the same input as one matmul (Q/K/V, gate/up): one pass over
    /// the activations and one thread-pool dispatch instead of several. Their outputs come
    /// out side by side, `[rows, Σ out]`. Projections in different native formats (mixed
    /// K-quant files) stay apart, each a matmul in its own bits.
    pub fn stacked(weights: &[QTensor], mode: WeightMode) -> Result<Self> {
        let quantized = weights
            .iter()
            .all(|w| !matches!(w.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16));
        if mode == WeightMode::Quantized && quantized {
            if let Some(q) = native(weights)? {
                return Ok(Self::from_quant(Arc::new(q)));
            }
            if let Some(parts) = native_parts(weights)? {
                return Ok(Self {
                    in_features: parts[0].cols(),
                    out_features: parts.iter().map(|p| p.rows()).sum(),
                    weight: Weight::QuantParts(parts),
                });
            }
        }
        let dense = weights
            .iter()
            .map(|w| w.dequantize(&Device::Cpu))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let dense = Tensor::cat(&dense, 0)?;
        let (out_features, in_features) = dense.dims2()?;
        let weight = match mode {
            WeightMode::Quantized if quantized => {
                let values = dense.flatten_all()?.to_vec1::<f32>()?;
                match QuantMatrix::quantize_q8_0(&values, out_features, in_features) {
                    Some(q) => Weight::Quant(Arc::new(q)),
                    None => Weight::Dense(DenseMatrix::new(values, out_features, in_features)),
                }
            }
            _ => {
                let values = dense.flatten_all()?.to_vec1::<f32>()?;
                Weight::Dense(DenseMatrix::new(values, out_features, in_features))
            }
        };
        Ok(Self {
            weight,
            in_features,
            out_features,
        })
    }

    /// A layer over an already packed matrix (tied embeddings share the table's bytes).
    pub fn from_quant(q: Arc<QuantMatrix>) -> Self {
        Self {
            in_features: q.cols(),
            out_features: q.rows(),
            weight: Weight::Quant(q),
        }
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// Multiply-adds one activation row costs (`in · out`).
    pub fn multiply_adds(&self) -> usize {
        self.in_features * self.out_features
    }

    /// Bytes one pass over the weights reads: what a one-row matmul streams from memory.
    pub fn weight_bytes(&self) -> usize {
        match &self.weight {
            Weight::Quant(q) => q.weight_bytes(),
            Weight::QuantParts(parts) => parts.iter().map(QuantMatrix::weight_bytes).sum(),
            Weight::Dense(_) => self.in_features * self.out_features * size_of::<f32>(),
        }
    }

    /// `x`: `[rows, in]` → `y`: `[rows, out]`, written in place.
    pub fn forward_into(
        &self,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        act: &mut QuantizedActivations,
    ) -> Result<()> {
        self.forward_split_into(x, rows, &mut [y], act)
    }

    /// `y += x · Wᵀ`: a residual add as the result is stored.
    pub fn forward_add_into(
        &self,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        act: &mut QuantizedActivations,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        match &self.weight {
            Weight::Quant(w) => w.matmul_add_into(x, rows, y, act),
            Weight::QuantParts(_) | Weight::Dense(_) => {
                let out = self.dense_forward(x, rows, act)?;
                y.iter_mut().zip(&out).for_each(|(a, b)| *a += b);
            }
        }
        Ok(())
    }

    /// [`forward_split_into`](Self::forward_split_into) of `norm(x)`: on a native matrix
    /// the norm runs inside the activation quantization ([`Input`]); other weights read
    /// the rows normalized into `normed` (`[rows, in]`) first.
    pub fn forward_normed_split_into(
        &self,
        norm: &RmsNorm,
        x: &[f32],
        rows: usize,
        outs: &mut [&mut [f32]],
        scratch: (&mut [f32], &mut QuantizedActivations),
    ) -> Result<()> {
        let (normed, act) = scratch;
        match &self.weight {
            Weight::Quant(w) if rows > 0 => {
                let x = Input {
                    x,
                    norm: Some(norm),
                };
                w.matmul_split_into(x, rows, outs, act);
                Ok(())
            }
            _ => {
                norm.forward_into(x, normed);
                self.forward_split_into(normed, rows, outs, act)
            }
        }
    }

    /// A stacked layer's outputs straight into their own matrices (`[rows, width_i]`).
    pub fn forward_split_into(
        &self,
        x: &[f32],
        rows: usize,
        outs: &mut [&mut [f32]],
        act: &mut QuantizedActivations,
    ) -> Result<()> {
        debug_assert_eq!(x.len(), rows * self.in_features);
        if rows == 0 {
            return Ok(());
        }
        match &self.weight {
            Weight::Quant(w) => w.matmul_split_into(x, rows, outs, act),
            // One output per part (the stacked Q/K/V or gate/up): each part writes its own.
            Weight::QuantParts(parts)
                if parts.len() == outs.len()
                    && parts
                        .iter()
                        .zip(outs.iter())
                        .all(|(p, o)| o.len() == rows * p.rows()) =>
            {
                for (p, o) in parts.iter().zip(outs.iter_mut()) {
                    p.matmul_split_into(x, rows, std::slice::from_mut(o), act);
                }
            }
            Weight::QuantParts(_) | Weight::Dense(_) => {
                let out = self.dense_forward(x, rows, act)?;
                let mut start = 0;
                for o in outs.iter_mut() {
                    let width = o.len() / rows;
                    for (dst, src) in o
                        .chunks_exact_mut(width)
                        .zip(out.chunks_exact(self.out_features))
                    {
                        dst.copy_from_slice(&src[start..start + width]);
                    }
                    start += width;
                }
            }
        }
        Ok(())
    }

    /// The whole `[rows, out]` result in a new buffer, for the paths that cannot write in
    /// place.
    fn dense_forward(
        &self,
        x: &[f32],
        rows: usize,
        act: &mut QuantizedActivations,
    ) -> Result<Vec<f32>> {
        match &self.weight {
            Weight::Dense(w) => {
                let mut y = vec![0f32; rows * self.out_features];
                w.matmul_into(x, rows, &mut y);
                Ok(y)
            }
            Weight::QuantParts(parts) => {
                let mut y = vec![0f32; rows * self.out_features];
                let mut col = 0;
                for p in parts {
                    let mut part = vec![0f32; rows * p.rows()];
                    p.matmul_split_into(x, rows, &mut [&mut part], act);
                    for (dst, src) in y
                        .chunks_exact_mut(self.out_features)
                        .zip(part.chunks_exact(p.rows()))
                    {
                        dst[col..col + p.rows()].copy_from_slice(src);
                    }
                    col += p.rows();
                }
                Ok(y)
            }
            Weight::Quant(_) => unreachable!("native matrices write in place"),
        }
    }
}

/// The GGUF block format our kernels run natively, if `dtype` is one.
pub fn native_format(dtype: GgmlDType) -> Option<WeightFormat> {
    match dtype {
        GgmlDType::Q4_0 => Some(WeightFormat::Q4_0),
        GgmlDType::Q4_1 => Some(WeightFormat::Q4_1),
        GgmlDType::Q8_0 => Some(WeightFormat::Q8_0),
        GgmlDType::Q4K => Some(WeightFormat::Q4K),
        GgmlDType::Q5K => Some(WeightFormat::Q5K),
        GgmlDType::Q6K => Some(WeightFormat::Q6K),
        _ => None,
    }
}

/// Stacks `weights` row-wise in their own bits when they share a native format.
fn native(weights: &[QTensor]) -> Result<Option<QuantMatrix>> {
    let Some(first) = weights.first() else {
        return Ok(None);
    };
    let Some(format) = native_format(first.dtype()) else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    let (mut rows, mut cols) = (0, None);
    for w in weights {
        let (n, k) = w.shape().dims2()?;
        if w.dtype() != first.dtype() || cols.is_some_and(|c| c != k) {
            return Ok(None);
        }
        cols = Some(k);
        rows += n;
        bytes.extend_from_slice(&w.data()?);
    }
    let q = cols.and_then(|k| QuantMatrix::from_ggml(format, &bytes, rows, k));
    if q.is_none() {
        // Rows must be whole GGUF blocks (K-quants: super-blocks of 256, as ggml's files
        // have); otherwise the caller requantizes to Q8_0 (or keeps f32 if that fails too).
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            tracing::warn!(
                "{format:?} weights {rows}x{}: rows are not whole {}-element blocks, so no \
                 native kernel; requantized to Q8_0",
                cols.unwrap_or(0),
                format.ggml_block_elems()
            )
        });
    }
    Ok(q)
}

/// Each of `weights` in its own bits, when there are several and each has a native kernel
/// (their formats differ, or [`native`] would have stacked them).
fn native_parts(weights: &[QTensor]) -> Result<Option<Vec<QuantMatrix>>> {
    if weights.len() < 2 {
        return Ok(None);
    }
    let mut parts = Vec::with_capacity(weights.len());
    for w in weights {
        match native(std::slice::from_ref(w))? {
            Some(q)
                if parts
                    .first()
                    .is_none_or(|p: &QuantMatrix| p.cols() == q.cols()) =>
            {
                parts.push(q)
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(parts))
}

/// Floats of per-token work one pool task takes: a parallel loop over less costs more than
/// it saves, and Qwen3's per-head norms (rows of 128) in tasks of eight rows spent more
/// time handing out tasks than normalizing.
const TASK_FLOATS: usize = 8192;

/// Runs `f` on each `width`-wide row of `x` (with its index), on the compute pool when
/// there are at least two tasks' worth of rows. Rows are independent, so the result never
/// depends on the split.
pub(crate) fn for_each_row(
    x: &mut [f32],
    width: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    let width = width.max(1);
    let per_task = TASK_FLOATS.div_ceil(width);
    if x.len() / width >= 2 * per_task {
        ComputePool::global().for_each_chunk_mut(x, per_task * width, |t, rows| {
            for (i, row) in rows.chunks_exact_mut(width).enumerate() {
                f(t * per_task + i, row);
            }
        });
    } else {
        x.chunks_exact_mut(width)
            .enumerate()
            .for_each(|(i, row)| f(i, row));
    }
}

pub struct RmsNorm {
    weight: Vec<f32>,
    eps: f32,
}

impl RmsNorm {
    pub fn new(weight: QTensor, eps: f64) -> Result<Self> {
        let weight = weight.dequantize(&Device::Cpu)?.to_vec1::<f32>()?;
        Ok(Self {
            weight,
            eps: eps as f32,
        })
    }

    /// Normalizes every `weight.len()`-wide row of `x` in place.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        let kernel = CpuKernel::active();
        for_each_row(x, self.weight.len(), |_, row| {
            self.norm_row(None, row, kernel)
        });
    }

    /// `out = norm(x)`, row by row, in one pass over `x` (no copy first).
    pub fn forward_into(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), out.len(), "norm input and output sizes differ");
        let (kernel, width) = (CpuKernel::active(), self.weight.len());
        for_each_row(out, width, |r, row| {
            self.norm_row(Some(&x[r * width..(r + 1) * width]), row, kernel)
        });
    }

    /// The norm of `src` (of `row` itself where `None`) into `row`.
    #[inline(always)]
    fn norm_row(&self, src: Option<&[f32]>, row: &mut [f32], kernel: CpuKernel) {
        match kernel {
            CpuKernel::Portable => norm_row(&self.weight, self.eps, src, row),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: every kernel but the portable one implies AVX2 (`CpuKernel`).
            _ => unsafe { norm_row_avx2(&self.weight, self.eps, src, row) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => norm_row(&self.weight, self.eps, src, row),
        }
    }
}

impl RowNorm for RmsNorm {
    fn norm_into(&self, src: &[f32], dst: &mut [f32]) {
        self.norm_row(Some(src), dst, CpuKernel::active())
    }
}

/// RMSNorm of `src` (of `row` itself where `None`) into `row`: `v / rms · weight`.
#[inline(always)]
fn norm_row(weight: &[f32], eps: f32, src: Option<&[f32]>, row: &mut [f32]) {
    let mean_sq = sum_of_squares(src.unwrap_or(row)) / weight.len() as f32;
    let inv = 1.0 / (mean_sq + eps).sqrt();
    match src {
        Some(src) => {
            for ((o, v), w) in row.iter_mut().zip(src).zip(weight) {
                *o = v * inv * w;
            }
        }
        None => {
            for (v, w) in row.iter_mut().zip(weight) {
                *v = *v * inv * w;
            }
        }
    }
}

/// [`norm_row`] compiled for AVX2: the baseline x86-64 target vectorises it in 128-bit SSE
/// only. The same operations per lane (Rust never fuses `a * b + c`), so the same bits.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn norm_row_avx2(weight: &[f32], eps: f32, src: Option<&[f32]>, row: &mut [f32]) {
    norm_row(weight, eps, src, row)
}

/// Lanes of [`sum_of_squares`]' partial sums.
const SQUARE_LANES: usize = 16;

/// `Σ v²` over `row` in a fixed order: element `i` into lane `i % 16` (elements past the
/// last whole 16 into lanes `0..`), then the lanes pairwise, halves first. Sixteen
/// independent sums let the compiler vectorise it on every target with the same bits; a
/// single running sum waits on each add (a Qwen3-0.6B 512-token prefill spent ~6% of its
/// time in its norms).
#[inline(always)]
fn sum_of_squares(row: &[f32]) -> f32 {
    let mut lanes = [0f32; SQUARE_LANES];
    let mut chunks = row.chunks_exact(SQUARE_LANES);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v * v;
        }
    }
    for (l, v) in lanes.iter_mut().zip(chunks.remainder()) {
        *l += v * v;
    }
    let mut n = SQUARE_LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            lanes[i] += lanes[i + n];
        }
    }
    lanes[0]
}

/// Rotary position embedding with precomputed cos/sin tables.
pub struct Rope {
    style: RopeStyle,
    head_dim: usize,
    /// `[max_positions, head_dim / 2]`
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    pub fn new(config: &ModelConfig, max_positions: usize) -> Self {
        let half = config.head_dim / 2;
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for pos in 0..max_positions {
            for i in 0..half {
                let divisor = config.rope_freq_divisors.as_ref().map_or(1.0, |d| d[i]);
                let freq = config
                    .rope_theta
                    .powf(-2.0 * i as f64 / config.head_dim as f64)
                    / divisor;
                let angle = pos as f64 * freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Self {
            style: config.rope_style,
            head_dim: config.head_dim,
            cos,
            sin,
        }
    }

    pub fn max_positions(&self) -> usize {
        self.cos.len() / (self.head_dim / 2)
    }

    /// Rotates every head of `x` (`[rows, heads * head_dim]`), row `r` at `positions[r]`,
    /// after normalizing each head by `head_norm` where given (Qwen3's q/k norms): one pass
    /// and one parallel loop over the rows for both steps.
    pub fn apply(&self, x: &mut [f32], positions: &[usize], head_norm: Option<&RmsNorm>) {
        let width = x.len() / positions.len().max(1);
        let kernel = CpuKernel::active();
        let half = self.head_dim / 2;
        for_each_row(x, width, |r, row| {
            let at = positions[r] * half..(positions[r] + 1) * half;
            let turn = Turn {
                style: self.style,
                head_dim: self.head_dim,
                cos: &self.cos[at.clone()],
                sin: &self.sin[at],
            };
            if let Some(norm) = head_norm {
                for head in row.chunks_exact_mut(self.head_dim) {
                    norm.norm_row(None, head, kernel);
                }
            }
            turn.rotate_on(kernel, row);
        });
    }
}

/// One position's rotation: its cos/sin table rows.
struct Turn<'a> {
    style: RopeStyle,
    head_dim: usize,
    cos: &'a [f32],
    sin: &'a [f32],
}

impl Turn<'_> {
    /// [`Self::rotate`] in the widest build `kernel` allows.
    #[inline(always)]
    fn rotate_on(&self, kernel: CpuKernel, row: &mut [f32]) {
        match kernel {
            CpuKernel::Portable => self.rotate(row),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: every kernel but the portable one implies AVX2 (`CpuKernel`).
            _ => unsafe { self.rotate_avx2(row) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => self.rotate(row),
        }
    }

    /// Rotates every head of one row.
    #[inline(always)]
    fn rotate(&self, row: &mut [f32]) {
        let half = self.head_dim / 2;
        for head in row.chunks_exact_mut(self.head_dim) {
            match self.style {
                RopeStyle::HalfSplit => {
                    let (lo, hi) = head.split_at_mut(half);
                    for (((x0, x1), &c), &s) in lo.iter_mut().zip(hi).zip(self.cos).zip(self.sin) {
                        (*x0, *x1) = (*x0 * c - *x1 * s, *x0 * s + *x1 * c);
                    }
                }
                RopeStyle::AdjacentPairs => {
                    for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(self.cos).zip(self.sin) {
                        let (x0, x1) = (pair[0], pair[1]);
                        (pair[0], pair[1]) = (x0 * c - x1 * s, x0 * s + x1 * c);
                    }
                }
            }
        }
    }

    /// [`Self::rotate`] compiled for AVX2 (the same operations per lane, so the same bits).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn rotate_avx2(&self, row: &mut [f32]) {
        self.rotate(row)
    }
}

/// An MLP's gate and up projections with SwiGLU: `act = silu(x · Gᵀ) · (x · Uᵀ)`.
pub struct GateUp {
    weight: GateUpWeight,
}

enum GateUpWeight {
    /// Gate and up groups alternating in one matrix (one native format, whole groups):
    /// SwiGLU runs as each pair of tiles is stored, so gate and up never reach memory.
    Paired(QuantMatrix),
    /// Anything else: one stacked matmul into gate and up, then SwiGLU over them.
    Stacked(Linear),
}

impl GateUp {
    pub fn new(gate: QTensor, up: QTensor, mode: WeightMode) -> Result<Self> {
        if mode == WeightMode::Quantized {
            let (g, u) = (
                native(std::slice::from_ref(&gate))?,
                native(std::slice::from_ref(&up))?,
            );
            if let Some(paired) = g
                .zip(u)
                .and_then(|(g, u)| QuantMatrix::interleave_pairs(&g, &u))
            {
                return Ok(Self {
                    weight: GateUpWeight::Paired(paired),
                });
            }
        }
        Ok(Self {
            weight: GateUpWeight::Stacked(Linear::stacked(&[gate, up], mode)?),
        })
    }

    /// SwiGLU runs in the matmul's epilogue (no gate/up scratch needed).
    pub fn is_paired(&self) -> bool {
        matches!(self.weight, GateUpWeight::Paired(_))
    }

    /// Bytes one pass over both projections reads.
    pub fn weight_bytes(&self) -> usize {
        match &self.weight {
            GateUpWeight::Paired(q) => q.weight_bytes(),
            GateUpWeight::Stacked(l) => l.weight_bytes(),
        }
    }

    /// Multiply-adds one activation row costs in both projections.
    pub fn multiply_adds(&self) -> usize {
        match &self.weight {
            GateUpWeight::Paired(q) => q.rows() * q.cols(),
            GateUpWeight::Stacked(l) => l.multiply_adds(),
        }
    }

    /// `x`: `[rows, in]` → `out`: `[rows, width]` (the intermediate size). `gate` and `up`
    /// (`[rows, width]` each) are scratch for the stacked layout; the paired one does not
    /// touch them.
    pub fn forward_into(
        &self,
        x: &[f32],
        rows: usize,
        [gate, up]: [&mut [f32]; 2],
        out: &mut [f32],
        act: &mut QuantizedActivations,
    ) -> Result<()> {
        match &self.weight {
            GateUpWeight::Paired(q) => {
                let kernel = CpuKernel::active();
                q.matmul_pairs_into(x, rows, out, act, |g, u, o| swiglu_slice(g, u, o, kernel));
            }
            GateUpWeight::Stacked(l) => {
                l.forward_split_into(x, rows, &mut [&mut *gate, &mut *up], act)?;
                swiglu_into(gate, up, out, l.out_features() / 2);
            }
        }
        Ok(())
    }

    /// [`forward_into`](Self::forward_into) of `norm(x)`, the norm inside the activation
    /// quantization where the pairs are native ([`Linear::forward_normed_split_into`]).
    pub fn forward_normed_into(
        &self,
        norm: &RmsNorm,
        x: &[f32],
        rows: usize,
        [gate, up]: [&mut [f32]; 2],
        out: &mut [f32],
        scratch: (&mut [f32], &mut QuantizedActivations),
    ) -> Result<()> {
        let (normed, act) = scratch;
        match &self.weight {
            GateUpWeight::Paired(q) => {
                let kernel = CpuKernel::active();
                let x = Input {
                    x,
                    norm: Some(norm),
                };
                q.matmul_pairs_into(x, rows, out, act, |g, u, o| swiglu_slice(g, u, o, kernel));
                Ok(())
            }
            GateUpWeight::Stacked(_) => {
                norm.forward_into(x, normed);
                self.forward_into(normed, rows, [gate, up], out, act)
            }
        }
    }
}

/// `out = silu(gate) · up`, the SwiGLU activation, for `[rows, width]` matrices.
pub fn swiglu_into(gate: &[f32], up: &[f32], out: &mut [f32], width: usize) {
    let kernel = CpuKernel::active();
    for_each_row(out, width, |r, row| {
        let (g, u) = (&gate[r * width..][..width], &up[r * width..][..width]);
        swiglu_slice(g, u, row, kernel);
    });
}

/// [`swiglu_row`] in 256-bit vectors for any kernel but the portable one. (In 512-bit ones
/// a 512-token prefill was slower in four rounds of four: 0.89–0.99×.)
#[inline(always)]
fn swiglu_slice(gate: &[f32], up: &[f32], out: &mut [f32], kernel: CpuKernel) {
    match kernel {
        CpuKernel::Portable => swiglu_row(gate, up, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: every kernel but the portable one implies AVX2 (`CpuKernel`).
        _ => unsafe { swiglu_row_avx2(gate, up, out) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => swiglu_row(gate, up, out),
    }
}

#[inline(always)]
fn swiglu_row(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp(-g)) * u;
    }
}

/// The same operations in 256-bit vectors. `exp` has no fused steps and Rust never
/// contracts `a * b + c`, so every lane rounds as the scalar code does: the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn swiglu_row_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    swiglu_row(gate, up, out)
}

/// The token embedding table. Rows are read on demand from the quantized table when the
/// file's format has a native kernel (exact values, no f32 copy of the whole table), and
/// tied output projections share those bytes.
pub struct Embedding {
    table: EmbeddingTable,
    width: usize,
}

enum EmbeddingTable {
    Quant(Arc<QuantMatrix>),
    Dense(Vec<f32>),
}

impl Embedding {
    pub fn new(weight: &QTensor) -> Result<Self> {
        let (vocab, width) = weight.shape().dims2()?;
        if let Some(format) = native_format(weight.dtype()) {
            if let Some(q) = QuantMatrix::from_ggml(format, &weight.data()?, vocab, width) {
                return Ok(Self {
                    table: EmbeddingTable::Quant(Arc::new(q)),
                    width,
                });
            }
        }
        let dense = weight
            .dequantize(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        Ok(Self {
            table: EmbeddingTable::Dense(dense),
            width,
        })
    }

    /// The packed table, for an output projection tied to it.
    pub fn quantized(&self) -> Option<Arc<QuantMatrix>> {
        match &self.table {
            EmbeddingTable::Quant(q) => Some(q.clone()),
            EmbeddingTable::Dense(_) => None,
        }
    }

    /// Writes the rows of `tokens` into `out` (`[tokens, width]`).
    pub fn lookup_into(&self, tokens: &[u32], out: &mut [f32]) {
        for (&tok, row) in tokens.iter().zip(out.chunks_exact_mut(self.width)) {
            let tok = tok as usize;
            match &self.table {
                EmbeddingTable::Quant(q) => q.dequantize_row(tok, row),
                EmbeddingTable::Dense(d) => {
                    row.copy_from_slice(&d[tok * self.width..(tok + 1) * self.width])
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exp` reads its power of two from the rounding constant's mantissa bits; taking it
    /// with a float→int conversion instead gives the same bits for every input, NaN and the
    /// clamped ranges included (a sweep over every 251st f32 bit pattern).
    #[test]
    fn exp_takes_its_exponent_from_the_rounding_bits_exactly_as_a_conversion_would() {
        fn by_conversion(x: f32) -> f32 {
            const ROUND: f32 = 12_582_912.0;
            let x = x.clamp(-87.0, 88.0);
            let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
            let r = (x - n * 0.693_145_75) - n * 1.428_606_8e-6;
            let mut p = 1.0 / 720.0;
            for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
                p = p * r + c;
            }
            p * f32::from_bits(((n as i32 + 127) as u32) << 23)
        }
        for bits in (0..=u32::MAX)
            .step_by(251)
            .chain([0x7F80_0000, 0xFF80_0000])
        {
            let x = f32::from_bits(bits);
            let (got, want) = (exp(x), by_conversion(x));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "exp({x:e}) = {got:e}, by conversion {want:e}"
            );
        }
    }

    /// `[n, k]` weights quantized by candle into `dtype`.
    fn qtensor(n: usize, k: usize, seed: u32, dtype: GgmlDType) -> QTensor {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .collect();
        let t = Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    }

    #[test]
    fn gate_up_paired_gives_the_bits_of_a_stacked_matmul_then_swiglu() {
        let (n, k) = (64, 96);
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let gate_up = GateUp::new(
                qtensor(n, k, 1, dtype),
                qtensor(n, k, 2, dtype),
                WeightMode::Quantized,
            )
            .unwrap();
            assert!(
                matches!(gate_up.weight, GateUpWeight::Paired(_)),
                "{dtype:?}"
            );
            let stacked = Linear::stacked(
                &[qtensor(n, k, 1, dtype), qtensor(n, k, 2, dtype)],
                WeightMode::Quantized,
            )
            .unwrap();
            for m in [1, 5, 16] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0)
                    .collect();
                let mut act = QuantizedActivations::default();
                let (mut g, mut u, mut want) =
                    (vec![0.0; m * n], vec![0.0; m * n], vec![0.0; m * n]);
                stacked
                    .forward_split_into(&x, m, &mut [&mut g[..], &mut u[..]], &mut act)
                    .unwrap();
                swiglu_into(&g, &u, &mut want, n);
                let mut got = vec![f32::NAN; m * n];
                // The paired layout never touches the gate/up scratch.
                let (mut sg, mut su) = (Vec::new(), Vec::new());
                gate_up
                    .forward_into(&x, m, [&mut sg[..], &mut su[..]], &mut got, &mut act)
                    .unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{dtype:?} m={m}");
            }
        }
    }

    #[test]
    fn gate_up_whose_rows_are_not_whole_groups_stays_stacked_and_equal() {
        let (n, k) = (6, 64);
        let gate_up = GateUp::new(
            qtensor(n, k, 3, GgmlDType::Q4_0),
            qtensor(n, k, 4, GgmlDType::Q4_0),
            WeightMode::Quantized,
        )
        .unwrap();
        assert!(matches!(gate_up.weight, GateUpWeight::Stacked(_)));
        let x: Vec<f32> = (0..2 * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let (mut g, mut u, mut out) = (vec![0.0; 2 * n], vec![0.0; 2 * n], vec![f32::NAN; 2 * n]);
        gate_up
            .forward_into(
                &x,
                2,
                [&mut g[..], &mut u[..]],
                &mut out,
                &mut QuantizedActivations::default(),
            )
            .unwrap();
        let mut want = vec![0.0; 2 * n];
        swiglu_into(&g, &u, &mut want, n);
        assert_eq!(out, want);
    }

    #[test]
    fn norms_and_rope_give_the_portable_bits_on_every_kernel_this_cpu_runs() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut seed = 0x2545_F491_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32 - 0.5) * 8.0
        };
        // Widths with tails past every vector width; head dims of the models we run.
        for width in [1024, 576, 100, 7] {
            let norm = RmsNorm {
                weight: (0..width).map(|_| next()).collect(),
                eps: 1e-6,
            };
            let x: Vec<f32> = (0..width).map(|_| next()).collect();
            let mut want = vec![0.0; width];
            norm.norm_row(Some(&x), &mut want, CpuKernel::Portable);
            for kernel in CpuKernel::supported() {
                let (mut into, mut inplace) = (vec![f32::NAN; width], x.clone());
                norm.norm_row(Some(&x), &mut into, kernel);
                norm.norm_row(None, &mut inplace, kernel);
                assert_eq!(
                    bits(&into),
                    bits(&want),
                    "{kernel} norm into, width {width}"
                );
                assert_eq!(
                    bits(&inplace),
                    bits(&want),
                    "{kernel} norm in place, width {width}"
                );
            }
        }
        for (style, head_dim) in [
            (RopeStyle::HalfSplit, 128),
            (RopeStyle::AdjacentPairs, 64),
            (RopeStyle::HalfSplit, 10),
        ] {
            let (cos, sin): (Vec<f32>, Vec<f32>) =
                (0..head_dim / 2).map(|_| (next(), next())).unzip();
            let turn = Turn {
                style,
                head_dim,
                cos: &cos,
                sin: &sin,
            };
            let x: Vec<f32> = (0..3 * head_dim).map(|_| next()).collect();
            let mut want = x.clone();
            turn.rotate_on(CpuKernel::Portable, &mut want);
            for kernel in CpuKernel::supported() {
                let mut got = x.clone();
                turn.rotate_on(kernel, &mut got);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{kernel} {style:?} rope, head dim {head_dim}"
                );
            }
        }
    }

    /// Qwen3's per-head norm folded into RoPE's pass gives the bits of normalizing every
    /// head first and rotating after, row by row at each row's position.
    #[test]
    fn rope_with_a_head_norm_equals_the_norm_then_the_rotation() {
        let (head_dim, heads, rows, max_pos) = (16, 3, 5, 9);
        let half = head_dim / 2;
        let wave = |i: usize| ((i as f32) * 0.37).sin();
        let rope = Rope {
            style: RopeStyle::HalfSplit,
            head_dim,
            cos: (0..max_pos * half).map(|i| wave(i).abs()).collect(),
            sin: (0..max_pos * half).map(|i| wave(i + 7)).collect(),
        };
        let norm = RmsNorm {
            weight: (0..head_dim).map(|i| 1.0 + wave(i + 3)).collect(),
            eps: 1e-6,
        };
        let positions = [4, 0, 8, 3, 3];
        let x: Vec<f32> = (0..rows * heads * head_dim)
            .map(|i| wave(i) * 5.0)
            .collect();
        let mut fused = x.clone();
        rope.apply(&mut fused, &positions, Some(&norm));
        let mut apart = x;
        norm.forward_inplace(&mut apart);
        rope.apply(&mut apart, &positions, None);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fused), bits(&apart));
    }

    #[test]
    fn swiglu_gives_the_scalar_bits_on_every_kernel_this_cpu_runs() {
        // Ordinary values, both ends of exp's clamp, overflow, tiny and signed zeros, NaN
        // and infinities, odd lengths (every vector width leaves a tail).
        let mut gate = vec![
            0.0f32, -0.0, 1e-30, -1e-30, 88.5, -88.5, 200.0, -200.0, 3e38,
        ];
        gate.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40]);
        let mut seed = 0x9E37_79B9_u32;
        for _ in 0..1021 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            gate.push((seed as f32 / u32::MAX as f32 - 0.5) * 40.0);
        }
        let up: Vec<f32> = gate.iter().map(|g| 0.75 - g * 0.01).collect();
        for n in [gate.len(), 23, 7, 1] {
            let mut scalar = vec![0.0; n];
            swiglu_row(&gate[..n], &up[..n], &mut scalar);
            for kernel in CpuKernel::supported() {
                let mut wide = vec![f32::NAN; n];
                swiglu_slice(&gate[..n], &up[..n], &mut wide, kernel);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&scalar), bits(&wide), "{kernel}, length {n}");
            }
        }
    }
}
