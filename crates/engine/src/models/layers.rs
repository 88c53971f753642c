//! Building blocks shared by every model: linear layers, RMSNorm, rotary embeddings.
//!
//! Activations are plain row-major `f32` slices `[rows, width]`; only matmuls go through
//! candle, so the rest of the forward pass reads as ordinary loops.

use super::q8_matrix::Q8Matrix;
use crate::error::Result;
use crate::model_config::{ModelConfig, RopeStyle};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

/// How matmul weights are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightMode {
    /// Quantized weights stay quantized (repacked to Q8_0 at load); activations are
    /// quantized to Q8_0 inside the matmul, as llama.cpp does.
    #[default]
    Quantized,
    /// Every weight dequantized to f32: exact but slower; the yardstick for accuracy.
    F32,
}

impl std::str::FromStr for WeightMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "quantized" | "auto" => Ok(Self::Quantized),
            "f32" => Ok(Self::F32),
            other => Err(format!("unknown weight mode {other:?} (quantized, f32)")),
        }
    }
}

/// `y = x · Wᵀ` with `W` of shape `[out, in]`.
pub struct Linear {
    weight: Weight,
    in_features: usize,
    out_features: usize,
}

enum Weight {
    /// Our batched Q8_0 kernel: every quantized type is repacked to it at load.
    Q8(Q8Matrix),
    /// candle: dense f32 weights, or widths our kernel does not take.
    Candle(QMatMul),
}

impl Linear {
    pub fn new(weight: QTensor, mode: WeightMode) -> Result<Self> {
        Self::stacked(&[weight], mode)
    }

    /// Several projections of the same input as one matmul (Q/K/V, gate/up): one pass over
    /// the activations and one thread-pool dispatch instead of several. Their outputs come
    /// out side by side; `split_columns` separates them.
    pub fn stacked(weights: &[QTensor], mode: WeightMode) -> Result<Self> {
        let quantized = weights
            .iter()
            .all(|w| !matches!(w.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16));
        let dense = weights
            .iter()
            .map(|w| w.dequantize(&Device::Cpu))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let dense = Tensor::cat(&dense, 0)?;
        let (out_features, in_features) = dense.dims2()?;
        let weight = match mode {
            // candle's quantized kernels need AVX-512 VNNI to batch well; ours needs AVX2.
            // Q8_0 reproduces Q8_0 exactly and Q4/Q5/Q6 values nearly so.
            WeightMode::Quantized if quantized => {
                let values = dense.flatten_all()?.to_vec1::<f32>()?;
                match Q8Matrix::quantize(&values, out_features, in_features) {
                    Some(q8) => Weight::Q8(q8),
                    None => Weight::Candle(QMatMul::Tensor(dense)),
                }
            }
            _ => Weight::Candle(QMatMul::Tensor(dense)),
        };
        Ok(Self {
            weight,
            in_features,
            out_features,
        })
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// `x`: `[rows, in]` → `[rows, out]`.
    pub fn forward(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        debug_assert_eq!(x.len(), rows * self.in_features);
        if rows == 0 {
            return Ok(Vec::new());
        }
        match &self.weight {
            Weight::Q8(w) => Ok(w.matmul(x, rows)),
            Weight::Candle(w) => {
                let x = Tensor::from_slice(x, (rows, self.in_features), &Device::Cpu)?;
                Ok(w.forward(&x)?.flatten_all()?.to_vec1::<f32>()?)
            }
        }
    }
}

/// Splits `[rows, Σ widths]` into one `[rows, width]` matrix per width.
pub fn split_columns(y: &[f32], rows: usize, widths: &[usize]) -> Vec<Vec<f32>> {
    let total: usize = widths.iter().sum();
    let mut parts: Vec<Vec<f32>> = widths
        .iter()
        .map(|w| Vec::with_capacity(rows * w))
        .collect();
    for row in y.chunks_exact(total).take(rows) {
        let mut start = 0;
        for (part, w) in parts.iter_mut().zip(widths) {
            part.extend_from_slice(&row[start..start + w]);
            start += w;
        }
    }
    parts
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
        let width = self.weight.len();
        for row in x.chunks_exact_mut(width) {
            let mean_sq = row.iter().map(|v| v * v).sum::<f32>() / width as f32;
            let inv = 1.0 / (mean_sq + self.eps).sqrt();
            for (v, w) in row.iter_mut().zip(&self.weight) {
                *v = *v * inv * w;
            }
        }
    }

    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut y = x.to_vec();
        self.forward_inplace(&mut y);
        y
    }
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
                let freq = config
                    .rope_theta
                    .powf(-2.0 * i as f64 / config.head_dim as f64);
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

    /// Rotates every head of `x` (`[rows, heads * head_dim]`), row `r` at `positions[r]`.
    pub fn apply(&self, x: &mut [f32], positions: &[usize]) {
        let half = self.head_dim / 2;
        let width = x.len() / positions.len().max(1);
        for (row, &pos) in x.chunks_exact_mut(width).zip(positions) {
            let cos = &self.cos[pos * half..(pos + 1) * half];
            let sin = &self.sin[pos * half..(pos + 1) * half];
            for head in row.chunks_exact_mut(self.head_dim) {
                for i in 0..half {
                    let (a, b) = match self.style {
                        RopeStyle::AdjacentPairs => (2 * i, 2 * i + 1),
                        RopeStyle::HalfSplit => (i, i + half),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * cos[i] - x1 * sin[i];
                    head[b] = x0 * sin[i] + x1 * cos[i];
                }
            }
        }
    }
}

/// `gate ← silu(gate) * up`, the SwiGLU activation.
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
