//! `Fp8Slab`: one slab of the `fp8` KV cache, OCP e4m3 bytes ([`E4m3`]) with one f16 scale
//! per head's row of one token (block length = head dim), quantized as keys and values are
//! written (the layout and reading are [`ScaledSlab`]'s).
//!
//! Why a scale per (token, KV head): vLLM's per-tensor scales are calibrated offline (1.0
//! without calibration), which flushes the small-magnitude heads to e4m3's subnormals and
//! zero; a scale per row adapts to every head and token for 2 bytes per `head_dim` values
//! (66 bytes where f16 takes 128 at head dim 64), and needs no head dim rule.

use crate::kv::scaled_slab::{block_scale, Code, ScaledSlab};

/// An `fp8` slab: e4m3 codes, one scale per head's row.
pub type Fp8Slab = ScaledSlab<E4m3>;

/// One OCP e4m3 (`e4m3fn`) byte: sign, 4 exponent bits (bias 7), 3 mantissa bits;
/// subnormals, no infinities. `0x7f`/`0xff` (NaN there) are never written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct E4m3(pub u8);

/// The largest finite e4m3 magnitude, which a row's largest magnitude is scaled to.
pub const E4M3_MAX: f32 = 448.0;

/// Every code's value (`0x7f` reads as 480, as its f16 image does: see [`E4m3::f16_bits`]).
static VALUES: [f32; 256] = {
    let mut table = [0.0f32; 256];
    let mut b = 0;
    while b < 256 {
        let (e, m) = ((b >> 3) & 0xf, (b & 7) as f32);
        let magnitude = if e == 0 {
            m / 512.0
        } else {
            // 2^(e − 10) built from its bits: (8 + m) · 2^(e − 10) is 1.m · 2^(e − 7).
            (8.0 + m) * f32::from_bits(((e + 127 - 10) as u32) << 23)
        };
        table[b] = if b & 0x80 != 0 { -magnitude } else { magnitude };
        b += 1;
    }
    table
};

impl E4m3 {
    /// `x` to the nearest code (ties to even), saturating at ±448 (no NaN is made); a NaN
    /// gives zero, as `q8_0`'s int8 cast does.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        let sign = ((x.to_bits() >> 24) & 0x80) as u8;
        let a = x.abs();
        let magnitude = if a.is_nan() {
            0
        } else if a >= E4M3_MAX {
            0x7e
        } else if a < 1.0 / 64.0 {
            // Subnormals, steps of 2^-9; 8 steps is the smallest normal, code 0x08.
            (a * 512.0).round_ties_even() as u8
        } else {
            // The f32's exponent and top 3 mantissa bits, rounded to nearest even (a carry
            // moves into the exponent), rebiased from 127 to 7.
            let b = a.to_bits();
            let r = (b + 0x7_ffff + ((b >> 20) & 1)) >> 20;
            (r - (120 << 3)).min(0x7e) as u8
        };
        Self(sign | magnitude)
    }

    /// The f16 whose value is this code's times 2^-8, subnormals included: the exponent
    /// and mantissa bits move into f16's places (bias 15 against 7), so a register of codes
    /// widens with `vcvtph2ps`.
    #[inline(always)]
    pub fn f16_bits(self) -> u16 {
        let b = self.0 as u16;
        ((b & 0x80) << 8) | ((b & 0x7f) << 7)
    }
}

impl Code for E4m3 {
    #[inline(always)]
    fn value(self) -> f32 {
        VALUES[self.0 as usize]
    }

    /// One head's row: its scale is the largest magnitude over 448, rounded to f16 first
    /// so each code is rounded against the scale that will multiply it back.
    #[inline]
    fn quantize(src: &[f32], mut put: impl FnMut(usize, Self)) -> u16 {
        let amax = src.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let (scale, inv) = block_scale(amax, E4M3_MAX);
        for (j, &x) in src.iter().enumerate() {
            put(j, Self::from_f32(x * inv));
        }
        scale
    }
}
