//! Times `QuantMatrix` as a decode step meets it: the weights come from memory, not cache.
//! It makes copies of one matrix until they hold ~150 MB (far past any L3), multiplies the
//! same activation rows by each copy in turn, and prints, per batch height, the best pass's
//! time, the weight bytes read per second and GOP/s. `quant_matmul` times one matrix kept
//! in cache, which is what a prefill's row tiles see after the first.
//!
//! Usage: `cargo run --release -p tokenmill-engine --example cold_matmul [-- --format
//! q4_0|q4_1|q5_0|q5_1|q8_0] [--shape KxN] [--rows 1,8,16]` (defaults: q4_0, 1024x3072, Qwen3-0.6B's
//! MLP, at 1, 2, 4, 8, 9, 16, 32 and 64 rows). `TOKENMILL_CPU_KERNEL` picks the path.
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::time::Instant;
use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
use tokenmill_engine::kernels::quant::{QuantMatrix, WeightFormat};

/// Bytes of weights the copies hold together.
const TOTAL_BYTES: usize = 150_000_000;

/// The value after `--name`, if given.
fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> candle_core::Result<()> {
    let (format, dtype) = match flag("--format").as_deref().unwrap_or("q4_0") {
        "q4_0" => (WeightFormat::Q4_0, GgmlDType::Q4_0),
        "q4_1" => (WeightFormat::Q4_1, GgmlDType::Q4_1),
        "q5_0" => (WeightFormat::Q5_0, GgmlDType::Q5_0),
        "q5_1" => (WeightFormat::Q5_1, GgmlDType::Q5_1),
        "q8_0" => (WeightFormat::Q8_0, GgmlDType::Q8_0),
        other => panic!("--format {other}: expected q4_0, q4_1, q5_0, q5_1 or q8_0"),
    };
    let shape = flag("--shape").unwrap_or_else(|| "1024x3072".into());
    let (k, n) = shape
        .split_once('x')
        .and_then(|(k, n)| Some((k.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .expect("--shape KxN, e.g. 1024x3072");
    let rows: Vec<usize> = flag("--rows")
        .unwrap_or_else(|| "1,2,4,8,9,16,32,64".into())
        .split(',')
        .map(|r| {
            r.parse()
                .expect("--rows: a comma-separated list of batch heights")
        })
        .collect();

    let w = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu)?;
    let data = QTensor::quantize(&w, dtype)?.data()?.into_owned();
    let one = QuantMatrix::from_ggml(format, &data, n, k).expect("whole blocks per row");
    let copies = TOTAL_BYTES.div_ceil(one.weight_bytes());
    let matrices: Vec<QuantMatrix> = (0..copies)
        .map(|_| QuantMatrix::from_ggml(format, &data, n, k).expect("as above"))
        .collect();
    let bytes = copies * one.weight_bytes();
    println!(
        "kernel: {}; {format:?} {k}x{n}, {copies} copies ({:.0} MB)",
        CpuKernel::active(),
        bytes as f64 / 1e6
    );
    println!("| rows | ms per pass | weight GB/s | GOP/s |");
    println!("|---:|---:|---:|---:|");
    for m in rows {
        let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let mut y = vec![0f32; m * n];
        // On a pool worker, as the engine's forward pass runs (see `quant_matmul`).
        let best = rayon::scope(|_| {
            (0..6)
                .map(|_| {
                    let t = Instant::now();
                    for q in &matrices {
                        q.matmul_into(&x, m, &mut y);
                    }
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        });
        let ops = 2.0 * (m * k * n * copies) as f64;
        println!(
            "| {m} | {:.2} | {:.1} | {:.1} |",
            best * 1e3,
            bytes as f64 / best / 1e9,
            ops / best / 1e9
        );
    }
    Ok(())
}
