//! `exp`: eˣ in plain f32 arithmetic, the same bits on every CPU and every kernel path.

/// `eˣ` in plain f32 arithmetic (no libm call), so loops over it vectorize: `2ⁿ · eʳ` with
/// `n = round(x / ln 2)`, `r` reduced in two parts, and a degree-6 Taylor polynomial on
/// `|r| ≤ ln 2 / 2` (relative error below 2e-7). No fused operations, so every CPU gives
/// the same bits.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and removing 1.5·2²³ rounds to the nearest integer (ties to even).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    // `n` (−126 ≤ n ≤ 127) sits exactly in `t`'s low mantissa bits, so the scale's exponent comes
    // from them: `n as i32` would be the same integer, but Rust's saturating float→int
    // conversion kept loops over `exp` from vectorising (eight scalar conversions with
    // NaN and range checks per eight lanes, most of a SwiGLU).
    let biased = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    p * f32::from_bits(biased << 23)
}
