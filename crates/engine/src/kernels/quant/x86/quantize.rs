//! Activation rows quantized on AVX2 and on AVX-512 (a block in two 512-bit registers),
//! each bit for bit the portable `quantize_block`, with each block's half sums taken while
//! its quants are in registers.

use crate::kernels::quant::quantize_block::scale_and_inverse;
use crate::kernels::quant::BLOCK;
use std::arch::x86_64::*;

/// [`quantize_row`](crate::kernels::quant::activations::quantize_row) on AVX2: the block
/// loop inside the target feature, so each block's code is inlined rather than called.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(in crate::kernels::quant) unsafe fn quantize_row(
    src: &[f32],
    dst: &mut [i8],
    scales: &mut [f32],
    halves: &mut [[i32; 2]],
) {
    // SAFETY: the CPU has AVX2 (this function's contract).
    quantize_blocks(src, dst, scales, halves, |s, d| unsafe {
        quantize_block(s, d)
    })
}

/// [`quantize_row`] on 512-bit registers: a block is two of them.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL (and AVX2).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(in crate::kernels::quant) unsafe fn quantize_row_avx512(
    src: &[f32],
    dst: &mut [i8],
    scales: &mut [f32],
    halves: &mut [[i32; 2]],
) {
    // SAFETY: the CPU has the features (this function's contract).
    quantize_blocks(src, dst, scales, halves, |s, d| unsafe {
        quantize_block_avx512(s, d)
    })
}

/// The block loop of both row quantizers, `block` quantizing one block and returning
/// its scale and quants; inlined into each caller's target features.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn quantize_blocks(
    src: &[f32],
    dst: &mut [i8],
    scales: &mut [f32],
    halves: &mut [[i32; 2]],
    block: impl Fn(&[f32; BLOCK], &mut [i8; BLOCK]) -> (f32, __m256i),
) {
    let blocks = src
        .chunks_exact(BLOCK)
        .zip(dst.chunks_exact_mut(BLOCK))
        .zip(scales);
    for (b, ((s, d), sc)) in blocks.enumerate() {
        if let (Ok(s), Ok(d)) = (s.try_into(), d.try_into()) {
            let (scale, bytes) = block(s, d);
            *sc = scale;
            if let Some(h) = halves.get_mut(b) {
                // SAFETY: the CPU has AVX2 (this function's contract).
                *h = unsafe { half_sums(bytes) };
            }
        }
    }
}

/// A block's 32 quants in order: the sums of the first and the last sixteen. `psadbw`
/// sums unsigned bytes, so each quant is biased by 128 first and the bias taken back.
#[inline]
#[target_feature(enable = "avx2")]
fn half_sums(bytes: __m256i) -> [i32; 2] {
    let u = _mm256_xor_si256(bytes, _mm256_set1_epi8(i8::MIN));
    // Four sums of eight bytes each, in 64-bit lanes.
    let s = _mm256_sad_epu8(u, _mm256_setzero_si256());
    let pair = |x: __m128i| _mm_cvtsi128_si32(_mm_add_epi64(x, _mm_unpackhi_epi64(x, x)));
    let bias = 16 * 128;
    [
        pair(_mm256_castsi256_si128(s)) - bias,
        pair(_mm256_extracti128_si256::<1>(s)) - bias,
    ]
}

/// [`quantize_block`] on two 512-bit registers, bit for bit; also returns the quants.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL (and AVX2).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn quantize_block_avx512(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> (f32, __m256i) {
    let p = src.as_ptr();
    // SAFETY: `src` holds 32 f32s, two unaligned 16-wide loads.
    let v = unsafe { [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))] };
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
    let (d, id) = scale_and_inverse(amax);
    let id = _mm512_set1_ps(id);
    let bytes = _mm256_inserti128_si256::<1>(
        _mm256_castsi128_si256(_mm512_cvtsepi32_epi8(to_i32_avx512(v[0], id))),
        _mm512_cvtsepi32_epi8(to_i32_avx512(v[1], id)),
    );
    // SAFETY: `dst` is 32 bytes; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, bytes) };
    (d, bytes)
}

/// [`to_i32`] on sixteen lanes, step for step: truncate, step away from zero where the
/// dropped fraction is ≥ 0.5, clamp, convert.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn to_i32_avx512(v: __m512, id: __m512) -> __m512i {
    let y = _mm512_mul_ps(v, id);
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
    let away =
        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(y, t)), _mm512_set1_ps(0.5));
    let sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(i32::MIN));
    let unit = _mm512_or_si512(sign, _mm512_castps_si512(_mm512_set1_ps(1.0)));
    let r = _mm512_mask_add_ps(t, away, t, _mm512_castsi512_ps(unit));
    let r = _mm512_min_ps(
        _mm512_max_ps(r, _mm512_set1_ps(-127.0)),
        _mm512_set1_ps(127.0),
    );
    _mm512_cvttps_epi32(r)
}

/// Vectorized [`quantize_block`](crate::kernels::quant::quantize_block::quantize_block),
/// bit for bit: `f32::round` is a libm call on
/// baseline x86-64, which would cost more than the matmul for small `n`.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn quantize_block(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> (f32, __m256i) {
    let p = src.as_ptr();
    // SAFETY: `src` holds 32 f32s, four unaligned 8-wide loads.
    let v = unsafe {
        [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ]
    };
    let m = _mm256_max_ps(
        _mm256_max_ps(abs(v[0]), abs(v[1])),
        _mm256_max_ps(abs(v[2]), abs(v[3])),
    );
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2)));
    let (d, id) = scale_and_inverse(amax);
    let id = _mm256_set1_ps(id);
    let q = [
        to_i32(v[0], id),
        to_i32(v[1], id),
        to_i32(v[2], id),
        to_i32(v[3], id),
    ];
    let bytes = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    // The packs work within 128-bit lanes; this puts the 4-byte groups back in order.
    let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: `dst` is 32 bytes; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, ordered) };
    (d, ordered)
}

#[inline]
#[target_feature(enable = "avx2")]
fn abs(v: __m256) -> __m256 {
    _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
}

/// `round(v * id)` clamped to [−127, 127], half away from zero like `f32::round`:
/// truncate, then step away from zero when the (exact) dropped fraction is ≥ 0.5.
#[inline]
#[target_feature(enable = "avx2")]
fn to_i32(v: __m256, id: __m256) -> __m256i {
    let y = _mm256_mul_ps(v, id);
    let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
    let away = _mm256_cmp_ps::<_CMP_GE_OQ>(abs(_mm256_sub_ps(y, t)), _mm256_set1_ps(0.5));
    let unit = _mm256_or_ps(_mm256_and_ps(y, _mm256_set1_ps(-0.0)), _mm256_set1_ps(1.0));
    let r = _mm256_add_ps(t, _mm256_and_ps(away, unit));
    let r = _mm256_min_ps(
        _mm256_max_ps(r, _mm256_set1_ps(-127.0)),
        _mm256_set1_ps(127.0),
    );
    _mm256_cvttps_epi32(r)
}
