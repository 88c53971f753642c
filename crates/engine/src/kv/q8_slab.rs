//! `Q8Slab`: one slab of the `q8_0` KV cache, int8s with one f16 scale per block of
//! [`Q8_BLOCK`] values along the head dim, quantized as keys and values are written (the
//! layout and reading are [`ScaledSlab`]'s).

use crate::kv::scaled_slab::{block_scale, Code, ScaledSlab};

pub use crate::config::kv_cache_dtype::Q8_BLOCK;

/// A `q8_0` slab: int8 codes in blocks of [`Q8_BLOCK`].
pub type Q8Slab = ScaledSlab<i8>;

impl Code for i8 {
    #[inline(always)]
    fn value(self) -> f32 {
        self as f32
    }
    #[inline]
    fn quantize(src: &[f32], mut put: impl FnMut(usize, Self)) -> u16 {
        let (scale, q) = quantize_block(src.try_into().expect("a whole q8_0 block"));
        for (j, &x) in q.iter().enumerate() {
            put(j, x);
        }
        scale
    }
}

/// Quantizes one block: the scale (f16 bits) is the largest magnitude over 127, rounded to
/// f16 first so each int8 is rounded against the scale that will multiply it back.
#[inline]
pub fn quantize_block(src: &[f32; Q8_BLOCK]) -> (u16, [i8; Q8_BLOCK]) {
    let amax = src.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let (scale, inv) = block_scale(amax, 127.0);
    let q = std::array::from_fn(|j| (src[j] * inv).round_ties_even().clamp(-127.0, 127.0) as i8);
    (scale, q)
}
