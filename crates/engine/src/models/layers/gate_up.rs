//! `GateUp`: an MLP's gate and up projections with SwiGLU applied as the tiles are stored.

use super::for_each_row::for_each_row;
use super::linear::{native, Linear};
use super::rms_norm::RmsNorm;
use crate::config::WeightMode;
use crate::error::Result;
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kernels::exp::exp;
use crate::kernels::quant::{Input, QuantMatrix, QuantizedActivations};
use candle_core::quantized::QTensor;

/// An MLP's gate and up projections with SwiGLU: `act = silu(x · Gᵀ) · (x · Uᵀ)`.
pub struct GateUp {
    pub(super) weight: GateUpWeight,
}

pub(super) enum GateUpWeight {
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
pub(super) fn swiglu_slice(gate: &[f32], up: &[f32], out: &mut [f32], kernel: CpuKernel) {
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
pub(super) fn swiglu_row(gate: &[f32], up: &[f32], out: &mut [f32]) {
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
