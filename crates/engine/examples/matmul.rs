//! Measures candle's quantized matmul on this machine for the shapes our models use.
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::time::Instant;

fn main() -> candle_core::Result<()> {
    for &(k, n) in &[(576usize, 1536usize), (768, 1536), (1024, 3072)] {
        let w = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu)?;
        let q = QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q8_0)?)?;
        for &m in &[1usize, 8, 64, 256] {
            let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu)?;
            q.forward(&x)?; // warm-up (repack)
            let iters = (2000 / m).max(5);
            let t = Instant::now();
            for _ in 0..iters {
                q.forward(&x)?;
            }
            let s = t.elapsed().as_secs_f64() / iters as f64;
            println!(
                "Q8_0 k={k} n={n} m={m}: {:.1} GFLOP/s ({:.3} ms)",
                2.0 * (m * k * n) as f64 / s / 1e9,
                s * 1e3
            );
        }
    }
    Ok(())
}
