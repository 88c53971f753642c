//! Times `QuantMatrix` (each native format, the active CPU path) against candle's `QMatMul`
//! on the shapes our models use (SmolLM2-135M and Qwen3-0.6B), printing GOP/s and the
//! weight bytes read per second. K-quants run only where `k` is a multiple of 256.
//!
//! Usage: `cargo run --release -p tokenmill-engine --example quant_matmul [-- --quick] [--ours-only] [--cpu] [KxN ...]`.
//! `TOKENMILL_CPU_KERNEL` picks the path (portable, avx2, avx_vnni, avx512_vnni).
//! Each cell is the best of several timed runs, so a busy machine skews it less. With
//! `--cpu` the clock is the CPU time of this process's threads (Linux), which ignores
//! time spent preempted: use it with `RAYON_NUM_THREADS=1` to compare kernels on a shared
//! machine.
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::time::Instant;
use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
use tokenmill_engine::kernels::quant::{QuantMatrix, WeightFormat};

const SHAPES: [(usize, usize); 7] = [
    (576, 1536),
    (576, 576),
    (576, 192),
    (1536, 576),
    (576, 49152),
    (1024, 3072),
    (3072, 1024),
];
const BATCHES: [usize; 5] = [1, 4, 16, 64, 256];
const FORMATS: [(WeightFormat, GgmlDType); 8] = [
    (WeightFormat::Q4_0, GgmlDType::Q4_0),
    (WeightFormat::Q4_1, GgmlDType::Q4_1),
    (WeightFormat::Q5_0, GgmlDType::Q5_0),
    (WeightFormat::Q5_1, GgmlDType::Q5_1),
    (WeightFormat::Q8_0, GgmlDType::Q8_0),
    (WeightFormat::Q4K, GgmlDType::Q4K),
    (WeightFormat::Q5K, GgmlDType::Q5K),
    (WeightFormat::Q6K, GgmlDType::Q6K),
];

/// Seconds on a monotonic clock: wall time, or with `--cpu` this process's CPU time.
fn now() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    if std::env::args().any(|a| a == "--cpu") {
        if let Some(s) = cpu_seconds() {
            return s;
        }
    }
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Sum over this process's threads of the time they ran on a CPU (first field of each
/// `/proc/self/task/*/schedstat`, in nanoseconds).
fn cpu_seconds() -> Option<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(ns as f64 * 1e-9)
}

/// Best seconds per call of `f`, over `reps` runs of enough calls to last ~`budget_s`.
fn best_seconds(budget_s: f64, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t = now();
    f();
    let once = (now() - t).max(1e-7);
    let iters = ((budget_s / reps as f64 / once) as usize).max(1);
    (0..reps)
        .map(|_| {
            let t = now();
            for _ in 0..iters {
                f();
            }
            (now() - t) / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() -> candle_core::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let ours_only = std::env::args().any(|a| a == "--ours-only");
    // schedstat advances in scheduler ticks, so CPU-time runs must be long to be precise.
    let cpu = std::env::args().any(|a| a == "--cpu");
    let budget = if quick { 0.1 } else { 0.4 } * if cpu { 3.0 } else { 1.0 };
    let reps = if cpu { 3 } else { 10 };
    println!("kernel: {}", CpuKernel::active());
    println!("| format | k | n | M | ours GOP/s | ours weight GB/s | candle GOP/s | speed-up |");
    println!("|---|---|---|---|---|---|---|---|");
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    for (format, dtype) in FORMATS {
        for &(k, n) in &SHAPES {
            if !only.is_empty() && !only.contains(&format!("{k}x{n}")) {
                continue;
            }
            // K-quants need whole super-blocks of 256 per row (not SmolLM2's 576).
            if !k.is_multiple_of(format.ggml_block_elems()) {
                continue;
            }
            let w = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu)?;
            let qt = QTensor::quantize(&w, dtype)?;
            let ours = QuantMatrix::from_ggml(format, &qt.data()?, n, k)
                .expect("benchmark widths are whole blocks");
            let candle = QMatMul::from_qtensor(qt)?;
            for &m in &BATCHES {
                let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu)?;
                let xv = x.flatten_all()?.to_vec1::<f32>()?;
                let mut y = vec![0f32; m * n];
                let ops = 2.0 * (m * k * n) as f64;
                // Timed on a pool worker, as the engine's forward pass runs: called from
                // outside the pool, every matmul would add a hand-off to the pool and back,
                // which at one row costs about as much as the matmul.
                let t_ours = rayon::scope(|_| {
                    best_seconds(budget, reps, || {
                        ours.matmul_into(&xv, m, &mut y);
                        std::hint::black_box(&y);
                    })
                });
                let t_candle = if ours_only {
                    f64::NAN
                } else {
                    best_seconds(budget, reps, || {
                        std::hint::black_box(candle.forward(&x).expect("candle matmul"));
                    })
                };
                println!(
                    "| {format:?} | {k} | {n} | {m} | {:.1} | {:.1} | {:.1} | {:.2}× |",
                    ops / t_ours / 1e9,
                    ours.weight_bytes() as f64 / t_ours / 1e9,
                    ops / t_candle / 1e9,
                    t_candle / t_ours
                );
            }
        }
    }
    Ok(())
}
