//! `exp2` in plain f32 arithmetic, the softmax's only transcendental: the portable fold,
//! the partition merge and the x86 folds (its polynomial, [`EXP2_C`], in vector form) all
//! take it, so every path gives the same bits.

/// Taylor coefficients of 2^f on |f| ≤ 1/2, lowest degree first.
pub(super) const EXP2_C: [f32; 7] = [
    1.0,
    std::f32::consts::LN_2,
    0.240_226_5,
    0.055_504_11,
    0.009_618_129,
    0.001_333_355_8,
    0.000_154_035_3,
];

/// 2^x for x ≤ 0 in plain f32 arithmetic, so it vectorises and gives the same bits on
/// every path: x = n + f with n an integer and |f| ≤ 1/2; 2^f from its degree-6 Taylor
/// polynomial (relative error below 3e-7), 2^n put straight into the exponent bits.
/// Inputs below -126 (weights under 1e-38 of the max) give exactly 0.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const C: [f32; 7] = EXP2_C;
    let xc = x.max(-126.0);
    let t = xc + ROUND;
    let n = t - ROUND;
    let f = xc - n;
    let mut p = C[6];
    for &c in C[..6].iter().rev() {
        p = p.mul_add(f, c);
    }
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let scale = f32::from_bits(((ni + 127) << 23) as u32);
    if x < -126.0 {
        0.0
    } else {
        p * scale
    }
}
