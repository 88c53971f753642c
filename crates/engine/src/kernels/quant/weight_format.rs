//! [`WeightFormat`]: the GGUF block formats the kernels run natively, and what each one's
//! block takes here (elements, bytes, rows per group). A leaf: every other file names it.

use super::{BLOCK, K_NR, NR, SUPER};

/// A GGUF block format our kernels run natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// `d · (q − 8)`, q ∈ 0..16.
    Q4_0,
    /// `d · q + m`, q ∈ 0..16.
    Q4_1,
    /// `d · (q − 16)`, q ∈ 0..32: a nibble and a fifth bit.
    Q5_0,
    /// `d · q + m`, q ∈ 0..32.
    Q5_1,
    /// `d · q`, q ∈ −127..=127.
    Q8_0,
    /// Super-blocks of 256 (f16 `d`, `dmin`) holding eight 32-blocks with 6-bit `sc`, `m`:
    /// `d·sc · q − dmin·m`, q ∈ 0..16.
    Q4K,
    /// As [`Q4K`](Self::Q4K) with a fifth bit: q ∈ 0..32.
    Q5K,
    /// Super-blocks of 256 (f16 `d`) holding sixteen 16-blocks with int8 `sc`:
    /// `d·sc · (q − 32)`, q ∈ 0..64.
    Q6K,
}

impl WeightFormat {
    /// Bytes of one GGUF block ([`ggml_block_elems`](Self::ggml_block_elems) elements).
    pub fn ggml_block_bytes(self) -> usize {
        match self {
            WeightFormat::Q4_0 => 18,
            WeightFormat::Q4_1 => 20,
            WeightFormat::Q5_0 => 22,
            WeightFormat::Q5_1 => 24,
            WeightFormat::Q8_0 => 34,
            WeightFormat::Q4K => 144,
            WeightFormat::Q5K => 176,
            WeightFormat::Q6K => 210,
        }
    }

    /// Elements of one GGUF block: 32, or a K-quant's super-block of 256.
    pub fn ggml_block_elems(self) -> usize {
        if self.is_k_quant() {
            SUPER
        } else {
            BLOCK
        }
    }

    /// A K-quant: scales per super-block of 256 and sub-scales per 32 (or 16) elements.
    pub fn is_k_quant(self) -> bool {
        matches!(
            self,
            WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K
        )
    }

    /// A minimum term `m · Σx` per block (Q4_1, Q5_1), added to the integer dot's product.
    pub(super) fn has_min(self) -> bool {
        matches!(self, WeightFormat::Q4_1 | WeightFormat::Q5_1)
    }

    /// Q5_0 or Q5_1: a 32-block's nibbles laid out as Q4_0's, plus a fifth bit each.
    pub(super) fn is_q5(self) -> bool {
        matches!(self, WeightFormat::Q5_0 | WeightFormat::Q5_1)
    }

    /// Weight rows per stored group (and tile): [`K_NR`] for K-quants, else [`NR`].
    pub(super) fn group_rows(self) -> usize {
        if self.is_k_quant() {
            K_NR
        } else {
            NR
        }
    }

    /// Quant bytes of one row's block as stored here (scales kept apart): the nibbles,
    /// plus the high bits (one or two per element) of Q5_0, Q5_1 and the K-quants.
    pub(super) fn quant_bytes(self) -> usize {
        match self {
            WeightFormat::Q4_0 | WeightFormat::Q4_1 | WeightFormat::Q4K => BLOCK / 2,
            WeightFormat::Q5_0 | WeightFormat::Q5_1 | WeightFormat::Q5K => BLOCK / 2 + BLOCK / 8,
            WeightFormat::Q6K => BLOCK / 2 + BLOCK / 4,
            WeightFormat::Q8_0 => BLOCK,
        }
    }
}
