//! Measures this machine's roofline inputs: memory read bandwidth (1 and all threads) and
//! candle's f32 matmul rate, so benchmark results can be put against what is possible.
use candle_core::{Device, Tensor};
use rayon::prelude::*;
use std::time::Instant;

fn read_bandwidth(buf: &[f32], threads: usize) -> f64 {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let s: f32 = pool.install(|| {
            buf.par_chunks(1 << 16)
                .map(|c| {
                    let mut acc = [0.0f32; 16];
                    for x in c.chunks_exact(16) {
                        for i in 0..16 {
                            acc[i] += x[i];
                        }
                    }
                    acc.iter().sum::<f32>()
                })
                .sum()
        });
        std::hint::black_box(s);
        best = best.max((buf.len() * 4) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

fn main() -> candle_core::Result<()> {
    let buf = vec![1.0f32; 256 << 20]; // 1 GiB
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
