//! `Q8Slab`: one slab of the `q8_0` KV cache, int8s with one f16 scale per block of
//! [`Q8_BLOCK`] values along the head dim, quantized as keys and values are written.
//!
//! The int8s sit where the f16 cache puts its elements (so the kernels index them the same
//! way); a quantization block is `Q8_BLOCK` elements `stride` apart: `stride` is the block
//! size for keys (transposed, one key element's positions side by side) and 1 for values.
//! The scales follow the same pattern one level up: element `i`'s scale is
//! `(i / (Q8_BLOCK · stride)) · stride + i % stride`, so the scales of one key block's
//! positions are side by side too, and a value row's scales are consecutive.
//!
//! Dequantizing is exact in f32 (an 11-bit f16 significand times a 7-bit integer), so every
//! kernel that widens an element gets the same float, whether it widens it to memory or in
//! a register.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use std::ops::Range;

pub use crate::config::kv_cache_dtype::Q8_BLOCK;

pub struct Q8Slab {
    pub qs: Vec<i8>,
    /// f16 bits, one per block of `Q8_BLOCK` values.
    pub scales: Vec<u16>,
    /// How far apart a quantization block's elements are.
    pub stride: usize,
}

impl Q8Slab {
    /// `len` zero elements (a multiple of `Q8_BLOCK · stride`), pages the OS backs lazily.
    pub fn zeroed(len: usize, stride: usize) -> Self {
        assert!(stride > 0 && len.is_multiple_of(Q8_BLOCK * stride));
        Self {
            qs: vec![0; len],
            scales: vec![0; len / Q8_BLOCK],
            stride,
        }
    }

    /// The index of element `i`'s scale.
    #[inline(always)]
    pub fn scale_index(&self, i: usize) -> usize {
        (i / (Q8_BLOCK * self.stride)) * self.stride + i % self.stride
    }

    /// Elements `start..start + dst.len()` dequantized to f32 (exact). In runs that share
    /// one scale (values: up to the next block) or whose scales are consecutive (keys: up
    /// to the next multiple of the stride), so each run's loop is a plain vector loop.
    #[inline(always)]
    pub fn load(&self, start: usize, dst: &mut [f32]) {
        let qs = &self.qs[start..start + dst.len()];
        let mut j = 0;
        while j < dst.len() {
            let i = start + j;
            let first = self.scale_index(i);
            if self.stride == 1 {
                let run = (Q8_BLOCK - i % Q8_BLOCK).min(dst.len() - j);
                let scale = f16::from_bits(self.scales[first]).to_f32();
                for (d, &q) in dst[j..j + run].iter_mut().zip(&qs[j..j + run]) {
                    *d = scale * q as f32;
                }
                j += run;
            } else {
                let run = (self.stride - i % self.stride).min(dst.len() - j);
                let dst = &mut dst[j..j + run];
                self.scales[first..first + run]
                    .reinterpret_cast::<f16>()
                    .convert_to_f32_slice(dst);
                for (d, &q) in dst.iter_mut().zip(&qs[j..j + run]) {
                    *d *= q as f32;
                }
                j += run;
            }
        }
    }

    /// Byte ranges of the int8s and of the scales that elements `elements` occupy (for
    /// backing pages).
    pub fn byte_ranges(&self, elements: Range<usize>) -> (Range<usize>, Range<usize>) {
        let scales = elements.start / Q8_BLOCK * 2..elements.end.div_ceil(Q8_BLOCK) * 2;
        (elements, scales)
    }
}

/// Quantizes one block: the scale (f16 bits) is the largest magnitude over 127, rounded to
/// f16 first so each int8 is rounded against the scale that will multiply it back.
#[inline]
pub fn quantize_block(src: &[f32; Q8_BLOCK]) -> (u16, [i8; Q8_BLOCK]) {
    let amax = src.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = f16::from_f32(amax / 127.0);
    // A block past f16's range keeps the largest finite scale (its extremes clamp) rather
    // than an infinite one, which would dequantize its zeros to NaN.
    let scale = if scale.is_finite() { scale } else { f16::MAX };
    let d = scale.to_f32();
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let q = std::array::from_fn(|j| (src[j] * inv).round_ties_even().clamp(-127.0, 127.0) as i8);
    (scale.to_bits(), q)
}
