//! The check that every weight a checkpoint hands over is finite.
//!
//! A file with a NaN or an infinity among its weights is refused, not loaded with a warning:
//! one such value in a matrix makes the output it feeds NaN for every token, the residual
//! stream carries it into every later layer, and the model then answers every request with
//! empty or meaningless text. No setting can serve such a file usefully, so the operator hears
//! about it at startup, by tensor name, instead of from users.
//!
//! The check runs over every weight at load, so it reads as little as it can: float tensors
//! are scanned whole in one branch-free pass (vectorisable), while quantized blocks hold only
//! integers apart from their f16 scale (and min), so only those are read. A NaN in a Q4_1
//! tensor lives in a block's `d` or `m`; its 4-bit quants cannot hold one.

use candle_core::quantized::GgmlDType;

/// Where the first non-finite value of a tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonFinite {
    /// The element at this index (float tensors).
    Element(usize),
    /// The scale or min of the block at this index (quantized tensors).
    BlockScale(usize),
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Element(i) => write!(f, "element {i}"),
            Self::BlockScale(i) => write!(f, "the scale of block {i}"),
        }
    }
}

/// f32, f16 and bf16 values are non-finite exactly when every exponent bit is set.
const F32_EXPONENT: u32 = 0x7f80_0000;
const F16_EXPONENT: u16 = 0x7c00;
const BF16_EXPONENT: u16 = 0x7f80;

/// The first NaN or infinity in a tensor's raw little-endian `bytes` of type `dtype`, if any.
/// Types without a check here (none of the loadable ones) pass.
pub fn first_non_finite(dtype: GgmlDType, bytes: &[u8]) -> Option<NonFinite> {
    use GgmlDType::*;
    match dtype {
        F32 => first_full_exponent::<4>(bytes, |b| {
            u32::from_le_bytes(b) & F32_EXPONENT == F32_EXPONENT
        })
        .map(NonFinite::Element),
        F16 => first_full_exponent::<2>(bytes, |b| {
            u16::from_le_bytes(b) & F16_EXPONENT == F16_EXPONENT
        })
        .map(NonFinite::Element),
        BF16 => first_full_exponent::<2>(bytes, |b| {
            u16::from_le_bytes(b) & BF16_EXPONENT == BF16_EXPONENT
        })
        .map(NonFinite::Element),
        // Block layouts (ggml): the byte offsets of each block's f16 scale and min.
        Q8_0 => first_bad_block_scale(bytes, 34, &[0]),
        Q4_0 => first_bad_block_scale(bytes, 18, &[0]),
        Q4_1 => first_bad_block_scale(bytes, 20, &[0, 2]),
        // Q5_0/Q5_1: `d` (and `m`), then the 32 fifth bits and the nibbles.
        Q5_0 => first_bad_block_scale(bytes, 22, &[0]),
        Q5_1 => first_bad_block_scale(bytes, 24, &[0, 2]),
        Q4K => first_bad_block_scale(bytes, 144, &[0, 2]),
        Q5K => first_bad_block_scale(bytes, 176, &[0, 2]),
        // Q6_K: 128 bytes of low bits, 64 of high bits, 16 int8 sub-scales, then `d`.
        Q6K => first_bad_block_scale(bytes, 210, &[208]),
        _ => None,
    }
}

/// Index of the first `N`-byte value for which `bad` holds. One pass ORs every verdict
/// together without branching (so it vectorises); only a tensor that fails it is searched.
fn first_full_exponent<const N: usize>(
    bytes: &[u8],
    bad: impl Fn([u8; N]) -> bool,
) -> Option<usize> {
    let value = |chunk: &[u8]| -> [u8; N] { chunk.try_into().unwrap_or([0; N]) };
    let any = bytes
        .chunks_exact(N)
        .fold(false, |acc, chunk| acc | bad(value(chunk)));
    if !any {
        return None;
    }
    bytes.chunks_exact(N).position(|chunk| bad(value(chunk)))
}

fn first_bad_block_scale(bytes: &[u8], block: usize, scales: &[usize]) -> Option<NonFinite> {
    bytes
        .chunks_exact(block)
        .position(|b| {
            scales
                .iter()
                .any(|&at| u16::from_le_bytes([b[at], b[at + 1]]) & F16_EXPONENT == F16_EXPONENT)
        })
        .map(NonFinite::BlockScale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn finite_floats_pass_and_the_first_nan_or_infinity_is_found() {
        let finite = [0.0, -0.0, 1.0, f32::MAX, f32::MIN, f32::MIN_POSITIVE / 2.0];
        assert_eq!(first_non_finite(GgmlDType::F32, &f32_bytes(&finite)), None);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut values = vec![1.0f32; 100];
            values[37] = bad;
            values[80] = bad;
            assert_eq!(
                first_non_finite(GgmlDType::F32, &f32_bytes(&values)),
                Some(NonFinite::Element(37)),
                "{bad}"
            );
        }
    }

    #[test]
    fn half_types_read_their_own_exponent() {
        let halves =
            |values: &[f16]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
        let ok = halves(&[f16::MAX, f16::MIN, f16::ZERO, f16::from_f32(1e-7)]);
        assert_eq!(first_non_finite(GgmlDType::F16, &ok), None);
        let bad = halves(&[f16::ONE, f16::NAN, f16::INFINITY]);
        assert_eq!(
            first_non_finite(GgmlDType::F16, &bad),
            Some(NonFinite::Element(1))
        );

        let bhalves =
            |values: &[bf16]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
        // bf16's largest finite value has f16's full exponent pattern (0x7f7f): still finite.
        let ok = bhalves(&[bf16::MAX, bf16::MIN, bf16::ONE]);
        assert_eq!(first_non_finite(GgmlDType::BF16, &ok), None);
        let bad = bhalves(&[bf16::ONE, bf16::ONE, bf16::NEG_INFINITY]);
        assert_eq!(
            first_non_finite(GgmlDType::BF16, &bad),
            Some(NonFinite::Element(2))
        );
    }

    /// Blocks of `size` bytes with every quant byte 0xff (legal: integers only) and scales 1.0.
    fn blocks(count: usize, size: usize, scales: &[usize]) -> Vec<u8> {
        let mut bytes = vec![0xffu8; count * size];
        for block in bytes.chunks_exact_mut(size) {
            for &at in scales {
                block[at..at + 2].copy_from_slice(&f16::ONE.to_le_bytes());
            }
        }
        bytes
    }

    #[test]
    fn a_nan_or_infinity_in_any_scale_of_a_quantized_block_is_found() {
        let layouts = [
            (GgmlDType::Q8_0, 34, vec![0]),
            (GgmlDType::Q4_0, 18, vec![0]),
            (GgmlDType::Q4_1, 20, vec![0, 2]),
            (GgmlDType::Q5_0, 22, vec![0]),
            (GgmlDType::Q5_1, 24, vec![0, 2]),
            (GgmlDType::Q4K, 144, vec![0, 2]),
            (GgmlDType::Q5K, 176, vec![0, 2]),
            (GgmlDType::Q6K, 210, vec![208]),
        ];
        for (dtype, size, scales) in layouts {
            let clean = blocks(8, size, &scales);
            assert_eq!(first_non_finite(dtype, &clean), None, "{dtype:?}");
            for &at in &scales {
                for bad in [f16::NAN, f16::INFINITY, f16::NEG_INFINITY] {
                    let mut bytes = clean.clone();
                    bytes[5 * size + at..5 * size + at + 2].copy_from_slice(&bad.to_le_bytes());
                    assert_eq!(
                        first_non_finite(dtype, &bytes),
                        Some(NonFinite::BlockScale(5)),
                        "{dtype:?} scale at byte {at} = {bad}"
                    );
                }
            }
        }
    }
}
