//! The x86 builds of the chunk fold, behind [`Isa`]: `avx2.rs` (256-bit, a run of heads at
//! once) and `avx512.rs` (a chunk's sixteen positions in one 512-bit register), each in the
//! portable fold's operation order, so every build gives the same bits. Adding a build: a
//! file with its folds, an `Isa` variant chosen in [`Isa::of`], and its arm in each fold
//! method here and in `jobs::with_isa` (which compiles the jobs with its target features).

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
use super::lanes::Lanes;
use crate::kernels::cpu_kernel::CpuKernel;

/// Which build of the kernel runs. It follows the quantized kernels' [`CpuKernel`], so
/// `TOKENMILL_CPU_KERNEL` picks both and the startup line `kernel: …` names both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2's build plus the 512-bit chunk fold ([`avx512`]) where the head dim allows it.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    pub(super) fn of(kernel: CpuKernel) -> Self {
        match kernel {
            CpuKernel::Portable => Isa::Portable,
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Avx2 | CpuKernel::AvxVnni => Isa::Avx2,
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Avx512Vnni | CpuKernel::Amx | CpuKernel::AmxEmulated => Isa::Avx512,
            #[cfg(not(target_arch = "x86_64"))]
            _ => Isa::Portable,
        }
    }

    /// Folds one chunk into a row's GQA group with the widest vector fold this build and
    /// head dim allow (both give the same bits).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C (`Rows::AVX2`), and AVX-512F where `self` is
    /// `Avx512` (which [`CpuKernel`] only picks on such a CPU); `d` a multiple of 32.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) unsafe fn fold_f32(
        self,
        q: &[f32],
        chunk: &avx2::F32Chunk,
        d: usize,
        lanes: Lanes,
        heads: avx2::HeadStates,
    ) {
        match self {
            // SAFETY: the caller's contract.
            Isa::Avx512 if avx512::covers(d) => unsafe {
                avx512::fold_heads_f32(q, chunk, d, lanes, heads)
            },
            _ => unsafe { avx2::fold_heads_f32(q, chunk, d, lanes, heads) },
        }
    }

    /// How many query heads [`fold_batch_f32`](Self::fold_batch_f32) takes at head dim `d`,
    /// where it runs at all.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn batch_heads(self, d: usize) -> Option<usize> {
        (self == Isa::Avx512 && avx512::covers(d)).then_some(avx512::BATCH)
    }

    /// [`fold_f32`](Self::fold_f32) over heads that all see the whole chunk, phase by phase.
    ///
    /// # Safety
    /// As [`fold_f32`](Self::fold_f32), and `batch_heads(d)` is `Some`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) unsafe fn fold_batch_f32(
        self,
        q: &[f32],
        chunk: &avx2::F32Chunk,
        d: usize,
        heads: avx2::HeadStates,
    ) {
        assert!(self.batch_heads(d).is_some());
        // SAFETY: the caller's contract; the assert above.
        unsafe { avx512::fold_batch_f32(q, chunk, d, heads) }
    }

    /// [`fold_f32`](Self::fold_f32) from an f16, `q8_0` or `fp8` cache's chunk in place.
    ///
    /// # Safety
    /// As [`fold_f32`](Self::fold_f32).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) unsafe fn fold_direct(
        self,
        q: &[f32],
        chunk: &avx2::DirectChunk,
        d: usize,
        lanes: Lanes,
        heads: avx2::HeadStates,
    ) {
        let wide = self == Isa::Avx512 && avx512::covers(d);
        // SAFETY (every arm): the caller's contract.
        match chunk {
            avx2::DirectChunk::F16(c) if wide => unsafe {
                avx512::fold_heads_f16(q, c, d, lanes, heads)
            },
            avx2::DirectChunk::F16(c) => unsafe { avx2::fold_heads_f16(q, c, d, lanes, heads) },
            avx2::DirectChunk::Q8(c) if wide => unsafe {
                avx512::fold_heads_scaled(q, c, d, lanes, heads)
            },
            avx2::DirectChunk::Q8(c) => unsafe { avx2::fold_heads_scaled(q, c, d, lanes, heads) },
            avx2::DirectChunk::Fp8(c) if wide => unsafe {
                avx512::fold_heads_scaled(q, c, d, lanes, heads)
            },
            avx2::DirectChunk::Fp8(c) => unsafe { avx2::fold_heads_scaled(q, c, d, lanes, heads) },
        }
    }
}
