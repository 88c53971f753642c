//! Measures this machine's roofline inputs: memory read bandwidth (1 and all threads), the
//! int8 dot-product peak of the instructions our kernels use (register-only, per core and
//! all cores) and candle's f32 matmul rate, so benchmark results can be put against what
//! is possible.
use candle_core::{Device, Tensor};
use std::time::Instant;
use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
use tokenmill_engine::kernels::int8_probe::Int8Probe;
use tokenmill_engine::kernels::read_bandwidth::ReadBandwidth;

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
    // Every probe this CPU runs; prefill answers to the active path's (`bench latency`).
    for probe in [
        Int8Probe::Avx2MaddubsMadd,
        Int8Probe::AvxVnni,
        Int8Probe::VnniZmm,
        Int8Probe::AmxTiles,
    ] {
        if !probe.is_supported() {
            if probe == Int8Probe::AmxTiles {
                let why = CpuKernel::amx_unavailable().unwrap_or_default();
                println!("int8 dot peak ({}): unavailable ({why})", probe.name());
            }
            continue;
        }
        {
            let name = probe.name();
            let one = probe.measure(1) / 1e9;
            let every = probe.measure(all) / 1e9;
            println!("int8 dot peak ({name}), 1 thread: {one:.1} GOP/s");
            println!("int8 dot peak ({name}), {all} threads: {every:.1} GOP/s");
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
