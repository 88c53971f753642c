//! How a job reads the cache ([`Rows`]): a run of one key element's positions, or one
//! value row, widened to f32 from an f32, f16, bf16, `q8_0` or `fp8` slab. Generic, so each
//! dtype (and whether the job runs under AVX2) compiles its own copy of the kernel.

use crate::kv::fp8_slab::{E4m3, Fp8Slab};
use crate::kv::q8_slab::Q8Slab;
use crate::kv::scaled_slab::{Code, ScaledSlab};

/// Reads `dst.len()` consecutive cache elements at an element offset, widened to f32: a run of
/// positions of one key element, or one head's value row.
pub(super) trait Rows: Sync {
    /// This copy of the kernel runs under AVX2 + FMA (`run_avx2`), so the chunk fold may
    /// use its explicit vector form (same operations, same order).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const AVX2: bool;
    fn key(&self, start: usize, dst: &mut [f32]);
    fn value(&self, start: usize, dst: &mut [f32]);
    /// The cache's keys and values, where this build's direct folds read them without a
    /// widened copy (the f16, `q8_0` and `fp8` caches under AVX2).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn direct(&self) -> Option<Direct<'_>> {
        None
    }
}

/// The slabs a direct fold reads: keys, then values.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) enum Direct<'a> {
    F16(&'a [u16], &'a [u16]),
    Q8(&'a Q8Slab, &'a Q8Slab),
    Fp8(&'a Fp8Slab, &'a Fp8Slab),
}

pub(super) struct F32Rows<'a, const AVX2: bool> {
    pub(super) keys: &'a [f32],
    pub(super) values: &'a [f32],
}

impl<const AVX2: bool> Rows for F32Rows<'_, AVX2> {
    const AVX2: bool = AVX2;
    #[inline(always)]
    fn key(&self, start: usize, dst: &mut [f32]) {
        dst.copy_from_slice(&self.keys[start..start + dst.len()]);
    }
    #[inline(always)]
    fn value(&self, start: usize, dst: &mut [f32]) {
        dst.copy_from_slice(&self.values[start..start + dst.len()]);
    }
}

/// f16 bits; `F16C` widens 8 at a time with `vcvtph2ps` (only instantiated where detected).
pub(super) struct F16Rows<'a, const F16C: bool> {
    pub(super) keys: &'a [u16],
    pub(super) values: &'a [u16],
}

impl<const F16C: bool> Rows for F16Rows<'_, F16C> {
    const AVX2: bool = F16C;
    #[inline(always)]
    fn key(&self, start: usize, dst: &mut [f32]) {
        widen_f16::<F16C>(&self.keys[start..start + dst.len()], dst);
    }
    #[inline(always)]
    fn value(&self, start: usize, dst: &mut [f32]) {
        widen_f16::<F16C>(&self.values[start..start + dst.len()], dst);
    }
    #[inline(always)]
    fn direct(&self) -> Option<Direct<'_>> {
        F16C.then_some(Direct::F16(self.keys, self.values))
    }
}

#[inline(always)]
fn widen_f16<const F16C: bool>(src: &[u16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if F16C {
        // SAFETY: `F16C` rows are only built when the CPU has F16C (see `dispatch`).
        return unsafe { widen_f16_f16c(src, dst) };
    }
    for (o, &h) in dst.iter_mut().zip(src) {
        *o = half::f16::from_bits(h).to_f32();
    }
}

/// Hardware f16→f32; exact, so the same bits as `half`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen_f16_f16c(src: &[u16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let n = dst.len().min(src.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` keeps both 8-element accesses inside the slices.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = half::f16::from_bits(src[j]).to_f32();
    }
}

/// A quantized cache's codes times their blocks' f16 scales (exact in f32): `q8_0`'s int8s
/// or `fp8`'s e4m3 bytes.
pub(super) struct ScaledRows<'a, Q, const AVX2: bool> {
    pub(super) keys: &'a ScaledSlab<Q>,
    pub(super) values: &'a ScaledSlab<Q>,
}

/// A code whose slabs a direct fold reads in place.
pub(super) trait DirectCode: Code + Sync {
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn direct<'a>(keys: &'a ScaledSlab<Self>, values: &'a ScaledSlab<Self>) -> Direct<'a>;
}

impl DirectCode for i8 {
    fn direct<'a>(keys: &'a Q8Slab, values: &'a Q8Slab) -> Direct<'a> {
        Direct::Q8(keys, values)
    }
}

impl DirectCode for E4m3 {
    fn direct<'a>(keys: &'a Fp8Slab, values: &'a Fp8Slab) -> Direct<'a> {
        Direct::Fp8(keys, values)
    }
}

impl<Q: DirectCode, const AVX2: bool> Rows for ScaledRows<'_, Q, AVX2> {
    const AVX2: bool = AVX2;
    #[inline(always)]
    fn key(&self, start: usize, dst: &mut [f32]) {
        self.keys.load(start, dst);
    }
    #[inline(always)]
    fn value(&self, start: usize, dst: &mut [f32]) {
        self.values.load(start, dst);
    }
    #[inline(always)]
    fn direct(&self) -> Option<Direct<'_>> {
        AVX2.then(|| Q::direct(self.keys, self.values))
    }
}

/// bf16 bits: the top half of an f32, so widening is a shift.
pub(super) struct Bf16Rows<'a, const AVX2: bool> {
    pub(super) keys: &'a [u16],
    pub(super) values: &'a [u16],
}

impl<const AVX2: bool> Rows for Bf16Rows<'_, AVX2> {
    const AVX2: bool = AVX2;
    #[inline(always)]
    fn key(&self, start: usize, dst: &mut [f32]) {
        widen_bf16(&self.keys[start..start + dst.len()], dst);
    }
    #[inline(always)]
    fn value(&self, start: usize, dst: &mut [f32]) {
        widen_bf16(&self.values[start..start + dst.len()], dst);
    }
}

#[inline(always)]
fn widen_bf16(src: &[u16], dst: &mut [f32]) {
    for (o, &h) in dst.iter_mut().zip(src) {
        *o = f32::from_bits((h as u32) << 16);
    }
}
