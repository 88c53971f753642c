//! `GateUp`: an MLP's gate and up projections with their gated activation (SwiGLU or GeGLU)
//! applied as the tiles are stored.

use super::gated_activation::GatedActivation;
use super::linear::{native, Linear};
use super::rms_norm::RmsNorm;
use crate::config::WeightMode;
use crate::error::Result;
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kernels::quant::{Input, QuantMatrix, QuantizedActivations};
use candle_core::quantized::QTensor;

/// An MLP's gate and up projections with a gated activation: `act = f(x · Gᵀ) · (x · Uᵀ)`,
/// `f` SiLU (SwiGLU) or tanh-approximated GELU (GeGLU).
pub struct GateUp {
    pub(super) weight: GateUpWeight,
    activation: GatedActivation,
}

pub(super) enum GateUpWeight {
    /// Gate and up groups alternating in one matrix (one native format, whole groups):
    /// SwiGLU runs as each pair of tiles is stored, so gate and up never reach memory.
    Paired(QuantMatrix),
    /// Anything else: one stacked matmul into gate and up, then SwiGLU over them.
    Stacked(Linear),
}

impl GateUp {
    /// SwiGLU's projections.
    pub fn new(gate: QTensor, up: QTensor, mode: WeightMode) -> Result<Self> {
        Self::with_activation(gate, up, mode, GatedActivation::Silu)
    }

    pub fn with_activation(
        gate: QTensor,
        up: QTensor,
        mode: WeightMode,
        activation: GatedActivation,
    ) -> Result<Self> {
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
                    activation,
                });
            }
        }
        Ok(Self {
            weight: GateUpWeight::Stacked(Linear::stacked(&[gate, up], mode)?),
            activation,
        })
    }

    /// The activation runs in the matmul's epilogue (no gate/up scratch needed).
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
        let f = self.activation;
        match &self.weight {
            GateUpWeight::Paired(q) => {
                let kernel = CpuKernel::active();
                q.matmul_pairs_into(x, rows, out, act, |g, u, o| f.apply_slice(g, u, o, kernel));
            }
            GateUpWeight::Stacked(l) => {
                l.forward_split_into(x, rows, &mut [&mut *gate, &mut *up], act)?;
                f.apply_into(gate, up, out, l.out_features() / 2);
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
                let (kernel, f) = (CpuKernel::active(), self.activation);
                let x = Input {
                    x,
                    norm: Some(norm),
                };
                q.matmul_pairs_into(x, rows, out, act, |g, u, o| f.apply_slice(g, u, o, kernel));
                Ok(())
            }
            GateUpWeight::Stacked(_) => {
                norm.forward_into(x, normed);
                self.forward_into(normed, rows, [gate, up], out, act)
            }
        }
    }
}
