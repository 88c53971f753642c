//! `Linear`: `y = x · Wᵀ`, weights in their own GGUF bits where a native kernel exists, else f32.

use super::rms_norm::RmsNorm;
use crate::config::WeightMode;
use crate::error::Result;
use crate::kernels::dense_matrix::DenseMatrix;
use crate::kernels::quant::{Input, QuantMatrix, QuantizedActivations, WeightFormat};
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
    /// Our batched kernels, on the file's own bits (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q4K/Q5K/Q6K),
    /// or on Q8_0 for other quantized formats or widths the native kernel does not take.
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
        GgmlDType::Q5_0 => Some(WeightFormat::Q5_0),
        GgmlDType::Q5_1 => Some(WeightFormat::Q5_1),
        GgmlDType::Q8_0 => Some(WeightFormat::Q8_0),
        GgmlDType::Q4K => Some(WeightFormat::Q4K),
        GgmlDType::Q5K => Some(WeightFormat::Q5K),
        GgmlDType::Q6K => Some(WeightFormat::Q6K),
        _ => None,
    }
}

/// Stacks `weights` row-wise in their own bits when they share a native format.
pub(super) fn native(weights: &[QTensor]) -> Result<Option<QuantMatrix>> {
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
pub(super) fn native_parts(weights: &[QTensor]) -> Result<Option<Vec<QuantMatrix>>> {
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
