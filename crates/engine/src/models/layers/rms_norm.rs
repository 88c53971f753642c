//! `RmsNorm`: RMS normalisation per row, in a fixed summation order so every path gives the same bits.

use super::for_each_row::for_each_row;
use crate::error::Result;
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kernels::quant::RowNorm;
use candle_core::quantized::QTensor;
use candle_core::Device;

pub struct RmsNorm {
    pub(super) weight: Vec<f32>,
    pub(super) eps: f32,
}

impl RmsNorm {
    pub fn new(weight: QTensor, eps: f64) -> Result<Self> {
        let weight = weight.dequantize(&Device::Cpu)?.to_vec1::<f32>()?;
        Ok(Self {
            weight,
            eps: eps as f32,
        })
    }

    /// Multiplies every weight by `factor`: a scale the model folds into the norm.
    pub fn scale_weights(&mut self, factor: f32) {
        self.weight.iter_mut().for_each(|w| *w *= factor);
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
    pub(super) fn norm_row(&self, src: Option<&[f32]>, row: &mut [f32], kernel: CpuKernel) {
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
