//! `ScaledSlab`: a KV slab of one-byte codes, each block of values along the head dim
//! sharing one f16 scale; the storage of `q8_0` ([`Q8Slab`](super::q8_slab::Q8Slab), int8s
//! in blocks of 32) and `fp8` ([`Fp8Slab`](super::fp8_slab::Fp8Slab), e4m3 bytes in blocks
//! of one head's row), which differ only in the code and the block length.
//!
//! The codes sit where the f16 cache puts its elements (so the kernels index them the same
//! way); a quantization block is `block` elements `stride` apart: `stride` is the block
//! size for keys (transposed, one key element's positions side by side) and 1 for values.
//! The scales follow the same pattern one level up: element `i`'s scale is
//! `(i / (block · stride)) · stride + i % stride`, so the scales of one key block's
//! positions are side by side too, and a value row's scales are consecutive.
//!
//! Dequantizing is exact in f32 (an 11-bit f16 significand times a code of at most 7
//! significant bits), so every kernel that widens an element gets the same float, whether it
//! widens it to memory or in a register.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use std::ops::Range;

/// One stored element's code: a byte whose value times its block's scale is the element.
pub trait Code: Copy + Default {
    /// The code's value, exactly.
    fn value(self) -> f32;
    /// Quantizes one block (`src`, the slab's block length): returns its scale (f16 bits)
    /// and gives element `j`'s code to `put(j, code)`.
    fn quantize(src: &[f32], put: impl FnMut(usize, Self)) -> u16;
}

pub struct ScaledSlab<Q> {
    pub qs: Vec<Q>,
    /// f16 bits, one per block of `block` values.
    pub scales: Vec<u16>,
    /// Values that share one scale.
    pub block: usize,
    /// How far apart a quantization block's elements are.
    pub stride: usize,
}

impl<Q: Code> ScaledSlab<Q> {
    /// `len` zero elements (a multiple of `block · stride`), pages the OS backs lazily.
    pub fn zeroed(len: usize, block: usize, stride: usize) -> Self {
        assert!(block > 0 && stride > 0 && len.is_multiple_of(block * stride));
        Self {
            qs: vec![Q::default(); len],
            scales: vec![0; len / block],
            block,
            stride,
        }
    }

    /// The index of element `i`'s scale.
    #[inline(always)]
    pub fn scale_index(&self, i: usize) -> usize {
        (i / (self.block * self.stride)) * self.stride + i % self.stride
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
                let run = (self.block - i % self.block).min(dst.len() - j);
                let scale = f16::from_bits(self.scales[first]).to_f32();
                for (d, &q) in dst[j..j + run].iter_mut().zip(&qs[j..j + run]) {
                    *d = scale * q.value();
                }
                j += run;
            } else {
                let run = (self.stride - i % self.stride).min(dst.len() - j);
                let dst = &mut dst[j..j + run];
                self.scales[first..first + run]
                    .reinterpret_cast::<f16>()
                    .convert_to_f32_slice(dst);
                for (d, &q) in dst.iter_mut().zip(&qs[j..j + run]) {
                    *d *= q.value();
                }
                j += run;
            }
        }
    }

    /// Byte ranges of the codes and of the scales that elements `elements` occupy (for
    /// backing pages).
    pub fn byte_ranges(&self, elements: Range<usize>) -> (Range<usize>, Range<usize>) {
        let scales = elements.start / self.block * 2..elements.end.div_ceil(self.block) * 2;
        (elements, scales)
    }
}

/// A block's scale: its largest magnitude `amax` over the code's largest value `top`,
/// rounded to f16 first so each code is rounded against the scale that will multiply it
/// back; with the reciprocal the codes are found by (0 for a zero block).
#[inline]
pub fn block_scale(amax: f32, top: f32) -> (u16, f32) {
    let scale = f16::from_f32(amax / top);
    // A block past f16's range keeps the largest finite scale (its extremes clamp) rather
    // than an infinite one, which would dequantize its zeros to NaN.
    let scale = if scale.is_finite() { scale } else { f16::MAX };
    let d = scale.to_f32();
    (scale.to_bits(), if d > 0.0 { 1.0 / d } else { 0.0 })
}
