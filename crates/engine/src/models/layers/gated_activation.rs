//! `GatedActivation`: what a gated MLP applies to its gate before multiplying by up: SiLU
//! (SwiGLU: Llama, Qwen) or tanh-approximated GELU (GeGLU: Gemma).

use super::for_each_row::for_each_row;
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kernels::exp::exp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatedActivation {
    /// `silu(g) · u`.
    Silu,
    /// `gelu_tanh(g) · u`, transformers' `gelu_pytorch_tanh`.
    GeluTanh,
}

impl GatedActivation {
    /// `out = f(gate) · up` for `[rows, width]` matrices.
    pub fn apply_into(self, gate: &[f32], up: &[f32], out: &mut [f32], width: usize) {
        let kernel = CpuKernel::active();
        for_each_row(out, width, |r, row| {
            let (g, u) = (&gate[r * width..][..width], &up[r * width..][..width]);
            self.apply_slice(g, u, row, kernel);
        });
    }

    /// One row in the widest build `kernel` allows; every build gives the scalar bits.
    #[inline(always)]
    pub(super) fn apply_slice(self, gate: &[f32], up: &[f32], out: &mut [f32], kernel: CpuKernel) {
        match self {
            Self::Silu => swiglu_slice(gate, up, out, kernel),
            Self::GeluTanh => geglu_slice(gate, up, out, kernel),
        }
    }
}

/// `out = silu(gate) · up`, the SwiGLU activation, for `[rows, width]` matrices.
pub fn swiglu_into(gate: &[f32], up: &[f32], out: &mut [f32], width: usize) {
    GatedActivation::Silu.apply_into(gate, up, out, width)
}

/// [`swiglu_row`] in 256-bit vectors for any kernel but the portable one: 512-bit vectors
/// gave a prefill no gain, so one width serves every x86 kernel.
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

/// [`geglu_row`] in 256-bit vectors for any kernel but the portable one.
#[inline(always)]
pub(super) fn geglu_slice(gate: &[f32], up: &[f32], out: &mut [f32], kernel: CpuKernel) {
    match kernel {
        CpuKernel::Portable => geglu_row(gate, up, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: every kernel but the portable one implies AVX2 (`CpuKernel`).
        _ => unsafe { geglu_row_avx2(gate, up, out) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => geglu_row(gate, up, out),
    }
}

/// `-2·sqrt(2/π)`: tanh-GELU's `0.5·x·(1 + tanh(a))` is `x / (1 + exp(-2a))`, so it needs
/// only the same-bits `exp` (no libm `tanh`, which would not vectorise).
const MINUS_TWO_SQRT_2_OVER_PI: f32 = -1.595_769;
/// The cubic term of tanh-GELU's argument `a = sqrt(2/π)·(x + 0.044715·x³)`.
const GELU_CUBIC: f32 = 0.044_715;

#[inline(always)]
pub(super) fn geglu_row(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let arg = MINUS_TWO_SQRT_2_OVER_PI * (g + GELU_CUBIC * g * g * g);
        *o = g / (1.0 + exp(arg)) * u;
    }
}

/// [`geglu_row`] in 256-bit vectors: the same operations per lane, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn geglu_row_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    geglu_row(gate, up, out)
}
