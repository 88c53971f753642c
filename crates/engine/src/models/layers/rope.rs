//! `Rope`: rotary position embeddings from precomputed cos/sin tables.

use super::for_each_row::for_each_row;
use super::rms_norm::RmsNorm;
use crate::config::model_config::{ModelConfig, RopeStyle};
use crate::kernels::cpu_kernel::CpuKernel;

/// Rotary position embedding with precomputed cos/sin tables.
pub struct Rope {
    pub(super) style: RopeStyle,
    pub(super) head_dim: usize,
    /// `[max_positions, head_dim / 2]`
    pub(super) cos: Vec<f32>,
    pub(super) sin: Vec<f32>,
}

impl Rope {
    /// The model's (global layers') rotation: `rope_theta` and its frequency scaling.
    pub fn new(config: &ModelConfig, max_positions: usize) -> Self {
        Self::with_base(
            config,
            config.rope_theta,
            config.rope_freq_divisors.as_deref(),
            max_positions,
        )
    }

    /// `config`'s heads rotated with base `theta`, each frequency divided by `divisors[i]`
    /// where given: a hybrid model's sliding layers use their own base, unscaled.
    pub fn with_base(
        config: &ModelConfig,
        theta: f64,
        divisors: Option<&[f64]>,
        max_positions: usize,
    ) -> Self {
        let half = config.head_dim / 2;
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for pos in 0..max_positions {
            for i in 0..half {
                let divisor = divisors.map_or(1.0, |d| d[i]);
                let freq = theta.powf(-2.0 * i as f64 / config.head_dim as f64) / divisor;
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
pub(super) struct Turn<'a> {
    pub(super) style: RopeStyle,
    pub(super) head_dim: usize,
    pub(super) cos: &'a [f32],
    pub(super) sin: &'a [f32],
}

impl Turn<'_> {
    /// [`Self::rotate`] in the widest build `kernel` allows.
    #[inline(always)]
    pub(super) fn rotate_on(&self, kernel: CpuKernel, row: &mut [f32]) {
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
