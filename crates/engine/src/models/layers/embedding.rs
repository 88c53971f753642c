//! `Embedding`: the token embedding table, rows read on demand from the quantized table.

use super::linear::native_format;
use crate::error::Result;
use crate::kernels::quant::QuantMatrix;
use candle_core::quantized::QTensor;
use candle_core::Device;
use std::sync::Arc;

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
