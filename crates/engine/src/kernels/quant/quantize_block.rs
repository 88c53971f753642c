//! The one 32-block quantizer: scale amax/127, quants rounded half away from zero. Weights
//! quantized to Q8_0 at load, activation rows per matmul and every instruction set's row
//! quantizer (`x86/quantize.rs`) give its bits; a leaf, so each of them can name it.

use super::BLOCK;

/// Quantizes one 32-element block into `dst` and returns its scale (amax/127). Rounds
/// half away from zero, like C's `roundf`.
pub(super) fn quantize_block(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> f32 {
    let amax = src.iter().fold(0f32, |a, v| a.max(v.abs()));
    let (d, id) = scale_and_inverse(amax);
    for (q, v) in dst.iter_mut().zip(src) {
        // −128 is excluded: it would let maddubs pairs saturate i16.
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    d
}

/// The block scale and the multiplier that maps the block onto [−127, 127].
pub(super) fn scale_and_inverse(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    // A block below ~3.7e-37 has no finite inverse: it quantizes to zeros. (An infinite
    // one made `±0 · ∞` NaN, which the scalar rounding and the vector clamps turned into
    // different bytes.)
    let id = 1.0 / d;
    (d, if id.is_finite() { id } else { 0.0 })
}
