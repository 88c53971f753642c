//! Measures this machine's roofline inputs: memory read bandwidth (1 and all threads), the
//! int8 dot-product peak of the instructions our kernels use (register-only, per core and
//! all cores) and candle's f32 matmul rate, so benchmark results can be put against what
//! is possible.
use candle_core::{Device, Tensor};
use rayon::prelude::*;
use std::time::Instant;
use tokenmill_engine::read_bandwidth::ReadBandwidth;

/// GB/s of `probe` read by a pool of `threads` threads, best of five.
fn read_bandwidth(probe: &ReadBandwidth, threads: usize) -> f64 {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| probe.measure(5)) / 1e9
}

fn main() -> candle_core::Result<()> {
    let buf = ReadBandwidth::new(1 << 30);
    let all = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "read bandwidth, 1 thread: {:.1} GB/s",
        read_bandwidth(&buf, 1)
    );
    println!(
        "read bandwidth, {all} threads: {:.1} GB/s",
        read_bandwidth(&buf, all)
    );
    drop(buf);
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        let one = int8_peak(1);
        let every = int8_peak(all);
        println!("int8 dot peak (AVX2 maddubs+madd), 1 thread: {one:.1} GOP/s");
        println!("int8 dot peak (AVX2 maddubs+madd), {all} threads: {every:.1} GOP/s");
    }
    // Where the kernel runs `vpdpbusd`, its peak is the one prefill answers to.
    #[cfg(target_arch = "x86_64")]
    if tokenmill_engine::cpu_kernel::CpuKernel::Avx512Vnni.is_supported() {
        for (width, bytes) in [("ymm", 32), ("zmm", 64)] {
            let one = vnni_peak(1, bytes);
            let every = vnni_peak(all, bytes);
            println!("int8 dot peak (AVX-512 VNNI vpdpbusd {width}), 1 thread: {one:.1} GOP/s");
            println!(
                "int8 dot peak (AVX-512 VNNI vpdpbusd {width}), {all} threads: {every:.1} GOP/s"
            );
        }
    }
    for &m in &[1usize, 64, 512] {
        let (k, n) = (1024, 4096);
        let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu)?;
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu)?;
        x.matmul(&w.t()?)?;
        let iters = (512 / m).clamp(3, 50);
        let t = Instant::now();
        for _ in 0..iters {
            x.matmul(&w.t()?)?;
        }
        let s = t.elapsed().as_secs_f64() / iters as f64;
        println!(
            "f32 matmul [{m},{k}]x[{k},{n}]: {:.1} GFLOP/s",
            2.0 * (m * k * n) as f64 / s / 1e9
        );
    }
    Ok(())
}

/// Best int8 multiply-add rate over `threads` threads, counting a multiply and an add as two
/// operations: independent `maddubs`+`madd` chains on registers only (no memory traffic),
/// the instruction pair our AVX2 kernel spends per 32 byte products.
#[cfg(target_arch = "x86_64")]
fn int8_peak(threads: usize) -> f64 {
    const ITERS: usize = 20_000_000;
    let t = Instant::now();
    let sums: Vec<i32> = (0..threads)
        .into_par_iter()
        .map(|_| {
            // SAFETY: the caller checked AVX2.
            unsafe { int8_chains(ITERS) }
        })
        .collect();
    std::hint::black_box(sums);
    // 8 chains × 32 byte products × 2 operations per iteration, per thread.
    (threads * ITERS * 8 * 32 * 2) as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// Independent accumulator chains of the VNNI peak: enough to cover the latency, with the
/// two operands shared so every chain stays in registers. (Sixteen chains, each with its
/// own operand, needed 33 registers and `black_box` a reload each round: 624 GOP/s a thread
/// where `vpdpbusd` zmm runs ~1,000 on Zen 5, docs/performance.md, eighteenth session.)
const CH: usize = 12;

/// [`int8_peak`] for `vpdpbusd` on `bytes`-wide registers (32: ymm, 64: zmm).
#[cfg(target_arch = "x86_64")]
fn vnni_peak(threads: usize, bytes: usize) -> f64 {
    const ITERS: usize = 20_000_000;
    let t = Instant::now();
    let sums: Vec<i32> = (0..threads)
        .into_par_iter()
        .map(|_| {
            // SAFETY: the caller checked AVX-512 VNNI.
            unsafe {
                if bytes == 64 {
                    vnni_chains_zmm(ITERS)
                } else {
                    vnni_chains_ymm(ITERS)
                }
            }
        })
        .collect();
    std::hint::black_box(sums);
    (threads * ITERS * CH * bytes * 2) as f64 / t.elapsed().as_secs_f64() / 1e9
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn vnni_chains_ymm(iters: usize) -> i32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm256_set1_epi8(3), _mm256_set1_epi8(-4));
    // Distinct starting sums, so no two chains are the same computation to merge.
    let mut acc: [__m256i; CH] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_dpbusd_epi32(*x, a, b);
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
unsafe fn int8_chains(iters: usize) -> i32 {
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
    let mut lanes = [0i32; 8];
    let total = acc
        .iter()
        .fold(_mm256_setzero_si256(), |s, v| _mm256_add_epi32(s, *v));
    // SAFETY: `lanes` is 8 i32s; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, total) };
    lanes.iter().sum()
}
