//! `Int8Probe`: the int8 dot-product rate of the instructions our quantized tiles multiply
//! with, register-only on as many threads as asked, so a prefill can be set against the
//! compute roofline of the same moment (as `ReadBandwidth` is for decode).

use crate::kernels::cpu_kernel::CpuKernel;
use rayon::prelude::*;
use std::time::Instant;

/// An instruction sequence whose peak rate bounds a kernel path's integer dot products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Probe {
    /// AVX2's `vpmaddubsw` + `vpmaddwd` (+ add): the pair the AVX2 tiles spend on 32 bytes.
    Avx2MaddubsMadd,
    /// AVX-VNNI's `vpdpbusd` on 256-bit registers: what the `avx_vnni` tiles run.
    AvxVnni,
    /// AVX-512 VNNI's `vpdpbusd` on 512-bit registers: what the `avx512_vnni` tiles run.
    VnniZmm,
    /// AMX's `tdpbssd` on full 16 × 64-byte tiles, four independent products a round: what
    /// the `amx_int8` tiles run (theirs take 32 bytes of `k` each).
    AmxTiles,
}

/// Rounds of every probe; ~60 ms a thread for `vpdpbusd` zmm on Zen 5.
const ITERS: usize = 20_000_000;

/// Independent accumulator chains of the VNNI probes: enough to cover the latency, with the
/// two operands shared so every chain stays in registers: with an operand per chain the
/// chains need more registers than there are, and the reloads then bound the rate instead
/// of the instruction.
const CH: usize = 12;

impl Int8Probe {
    /// The probe of the instructions `kernel`'s tiles use; `None` where we have none (the
    /// portable and NEON paths).
    pub fn for_kernel(kernel: CpuKernel) -> Option<Self> {
        match kernel {
            CpuKernel::Avx512Vnni => Some(Self::VnniZmm),
            CpuKernel::Amx => Some(Self::AmxTiles),
            CpuKernel::AvxVnni => Some(Self::AvxVnni),
            CpuKernel::Avx2 => Some(Self::Avx2MaddubsMadd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Avx2MaddubsMadd => "AVX2 maddubs+madd",
            Self::AvxVnni => "AVX-VNNI vpdpbusd ymm",
            Self::VnniZmm => "AVX-512 VNNI vpdpbusd zmm",
            Self::AmxTiles => "AMX tdpbssd",
        }
    }

    pub fn is_supported(self) -> bool {
        match self {
            Self::Avx2MaddubsMadd => CpuKernel::Avx2.is_supported(),
            Self::AvxVnni => CpuKernel::AvxVnni.is_supported(),
            Self::VnniZmm => CpuKernel::Avx512Vnni.is_supported(),
            Self::AmxTiles => CpuKernel::Amx.is_supported(),
        }
    }

    /// Operations per second (a multiply and an add each) over `threads` threads of the
    /// current rayon pool, one run of [`ITERS`] rounds each.
    ///
    /// # Panics
    /// If the CPU lacks the probe's instructions ([`is_supported`](Self::is_supported)).
    pub fn measure(self, threads: usize) -> f64 {
        assert!(self.is_supported(), "{} is not on this CPU", self.name());
        let start = Instant::now();
        let sums: Vec<i32> = (0..threads).into_par_iter().map(|_| self.run()).collect();
        std::hint::black_box(sums);
        let ops_per_round = match self {
            Self::Avx2MaddubsMadd => 8 * 32 * 2,
            Self::AvxVnni => CH * 32 * 2,
            Self::VnniZmm => CH * 64 * 2,
            Self::AmxTiles => AMX_PRODUCTS * 16 * 16 * 64 * 2,
        };
        (threads * self.rounds() * ops_per_round) as f64 / start.elapsed().as_secs_f64()
    }

    /// Rounds a thread runs: a round of tile products is ~60× a vector round.
    fn rounds(self) -> usize {
        match self {
            Self::AmxTiles => ITERS / 64,
            _ => ITERS,
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn run(self) -> i32 {
        // SAFETY: `measure` checked that the CPU has the probe's instructions.
        unsafe {
            match self {
                Self::Avx2MaddubsMadd => maddubs_chains(ITERS),
                Self::AvxVnni => vnni_chains_ymm(ITERS),
                Self::VnniZmm => vnni_chains_zmm(ITERS),
                Self::AmxTiles => amx_products(self.rounds()),
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn run(self) -> i32 {
        unreachable!("no x86 probe is supported off x86_64")
    }
}

/// Independent tile products a round of the AMX probe: its four result tiles.
const AMX_PRODUCTS: usize = 4;

/// `rounds` × four `tdpbssd` on full tiles (two activation, two weight tiles in registers).
///
/// # Safety
/// AMX int8 must be usable (`CpuKernel::Amx.is_supported`).
#[cfg(target_arch = "x86_64")]
unsafe fn amx_products(rounds: usize) -> i32 {
    use crate::kernels::amx::{HwTiles, TileConfig, TileUnit};
    let config = (0..8).fold(TileConfig::new(), |c, t| c.shape(t, 16, 64));
    let src = [[3u8; 64]; 16];
    let mut out = [[0i32; 16]; 16];
    let mut hw = HwTiles;
    // SAFETY: the caller's contract; every buffer is 16 rows of 64 bytes.
    unsafe {
        hw.configure(&config);
        hw.load::<0>(src.as_ptr().cast(), 64);
        hw.load::<1>(src.as_ptr().cast(), 64);
        hw.load::<2>(src.as_ptr().cast(), 64);
        hw.load::<3>(src.as_ptr().cast(), 64);
        for _ in 0..rounds {
            hw.dot::<4, 0, 2>();
            hw.dot::<5, 0, 3>();
            hw.dot::<6, 1, 2>();
            hw.dot::<7, 1, 3>();
        }
        hw.store::<4>(out.as_mut_ptr().cast(), 64);
        hw.release();
    }
    out[0][0]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn vnni_chains_ymm(iters: usize) -> i32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm256_set1_epi8(3), _mm256_set1_epi8(-4));
    // Distinct starting sums, so no two chains are the same computation to merge.
    let mut acc: [__m256i; CH] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_dpbusd_avx_epi32(*x, a, b);
        }
    }
    let total = acc
        .iter()
        .fold(_mm256_setzero_si256(), |s, v| _mm256_add_epi32(s, *v));
    _mm256_extract_epi32::<0>(total)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_chains_zmm(iters: usize) -> i32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm512_set1_epi8(3), _mm512_set1_epi8(-4));
    // Distinct starting sums, so no two chains are the same computation to merge.
    let mut acc: [__m512i; CH] = std::array::from_fn(|i| _mm512_set1_epi32(i as i32));
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_dpbusd_epi32(*x, a, b);
        }
    }
    let total = acc
        .iter()
        .fold(_mm512_setzero_si512(), |s, v| _mm512_add_epi32(s, *v));
    _mm512_reduce_add_epi32(total)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn maddubs_chains(iters: usize) -> i32 {
    use std::arch::x86_64::*;
    let (ones, a) = (_mm256_set1_epi16(1), _mm256_set1_epi8(3));
    // Each chain multiplies its own running sum's bytes, so no product is the same in two
    // chains or two rounds (nothing to hoist or merge), and 16 registers hold them all.
    let mut acc: [__m256i; 8] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
    for _ in 0..iters {
        for x in acc.iter_mut() {
            let d = _mm256_madd_epi16(_mm256_maddubs_epi16(a, *x), ones);
            *x = _mm256_add_epi32(*x, d);
        }
    }
    let total = acc
        .iter()
        .fold(_mm256_setzero_si256(), |s, v| _mm256_add_epi32(s, *v));
    _mm256_extract_epi32::<0>(total)
}
