//! `QuantMatrix`: every GGUF format it runs natively, against a dequantize-then-f64
//! reference, bit for bit across every CPU path this machine has, and batch-invariant.
//!
//! Tolerance: the weights are used exactly (their dequantized values are the reference's),
//! so the only approximation is quantizing the activations to int8 blocks. Rounding moves
//! each activation by at most half a step, `amax_block / 254`, so output `j` of row `i` is
//! off by at most `Σ_b amax_x(i, b) / 254 · Σ_{e ∈ b} |w(j, e)|`, plus f32 accumulation
//! rounding, which a relative slack on `Σ |w·x|` covers. The bound is per element, so a
//! wrong block, scale, nibble or lane in any element exceeds it.

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{Device, Tensor};
use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
use tokenmill_engine::kernels::quant::{QuantMatrix, QuantizedActivations, WeightFormat};

mod k_quants;
mod q5;

const FORMATS: [(WeightFormat, GgmlDType); 5] = [
    (WeightFormat::Q4_0, GgmlDType::Q4_0),
    (WeightFormat::Q4_1, GgmlDType::Q4_1),
    (WeightFormat::Q5_0, GgmlDType::Q5_0),
    (WeightFormat::Q5_1, GgmlDType::Q5_1),
    (WeightFormat::Q8_0, GgmlDType::Q8_0),
];

/// The 5-bit formats, for the tests of their own layout.
const Q5_FORMATS: [(WeightFormat, GgmlDType); 2] = [
    (WeightFormat::Q5_0, GgmlDType::Q5_0),
    (WeightFormat::Q5_1, GgmlDType::Q5_1),
];

/// The K-quants: super-blocks of 256, so every width below is a multiple of 256.
const K_FORMATS: [(WeightFormat, GgmlDType); 3] = [
    (WeightFormat::Q4K, GgmlDType::Q4K),
    (WeightFormat::Q5K, GgmlDType::Q5K),
    (WeightFormat::Q6K, GgmlDType::Q6K),
];

/// Deterministic xorshift so failures reproduce without a seed printout.
struct Rng(u64);

impl Rng {
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        self.next_u32() as f32 / 2_147_483_648.0 - 1.0
    }

    fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.unit() * scale).collect()
    }
}

/// Weights `[n, k]` quantized by candle (ggml's block encoders) into `format`'s GGUF bytes,
/// with an offset so Q4_1's (Q5_1's) minimums are not all alike.
fn ggml_weights(rng: &mut Rng, dtype: GgmlDType, n: usize, k: usize) -> (Vec<u8>, QTensor) {
    let w: Vec<f32> = (0..n * k)
        .map(|i| rng.unit() * 0.05 + if (i / 32) % 3 == 0 { 0.02 } else { 0.0 })
        .collect();
    let t = Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&t, dtype).unwrap();
    (q.data().unwrap().into_owned(), q)
}

fn packed(format: WeightFormat, dtype: GgmlDType, seed: u64, n: usize, k: usize) -> QuantMatrix {
    let (bytes, _) = ggml_weights(&mut Rng(seed), dtype, n, k);
    QuantMatrix::from_ggml(format, &bytes, n, k).expect("whole blocks")
}

fn dequantized(q: &QuantMatrix) -> Vec<f32> {
    let k = q.cols();
    let mut w = vec![0f32; q.rows() * k];
    for (r, row) in w.chunks_exact_mut(k).enumerate() {
        q.dequantize_row(r, row);
    }
    w
}

fn matmul(q: &QuantMatrix, x: &[f32], m: usize, kernel: CpuKernel) -> Vec<f32> {
    let mut y = vec![f32::NAN; m * q.rows()];
    q.matmul_with(x, m, &mut y, kernel);
    y
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

fn assert_close_to_reference(q: &QuantMatrix, x: &[f32], m: usize, kernel: CpuKernel) {
    let (n, k) = (q.rows(), q.cols());
    let w = dequantized(q);
    let got = matmul(q, x, m, kernel);
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let (mut want, mut bound, mut mag) = (0f64, 0f64, 0f64);
            for (xb, wb) in xr.chunks(32).zip(wr.chunks(32)) {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                bound += amax / 254.0 * wb.iter().map(|v| v.abs() as f64).sum::<f64>();
                for (a, b) in xb.iter().zip(wb) {
                    want += *a as f64 * *b as f64;
                    mag += (*a as f64 * *b as f64).abs();
                }
            }
            let g = got[i * n + j] as f64;
            let tol = bound * 1.001 + 4e-6 * mag + 1e-7;
            assert!(
                (g - want).abs() <= tol,
                "{:?} {kernel} m={m} n={n} k={k} ({i}, {j}): got {g}, want {want}, tol {tol}",
                q.format()
            );
        }
    }
}

/// The packed matrix's rows dequantize to exactly candle's values for the same GGUF bytes.
fn assert_dequantizes_like_candle(
    formats: &[(WeightFormat, GgmlDType)],
    (n, k): (usize, usize),
    seed: u64,
) {
    for &(format, dtype) in formats {
        let (bytes, qt) = ggml_weights(&mut Rng(seed), dtype, n, k);
        let q = QuantMatrix::from_ggml(format, &bytes, n, k).unwrap();
        let want = qt
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(bits(&dequantized(&q)), bits(&want), "{format:?}");
    }
}

#[test]
fn packed_rows_dequantize_to_exactly_what_candle_reads_from_the_same_bytes() {
    // One group; then five, so every group's blocks are read where they were written.
    assert_dequantizes_like_candle(&FORMATS, (7, 96), 1);
    assert_dequantizes_like_candle(&FORMATS, (40, 96), 2);
}

/// Each `(m, n, k)` case on every path, within the activation-rounding bound of a
/// dequantize-then-f64 reference.
fn assert_every_case_near_the_reference(
    formats: &[(WeightFormat, GgmlDType)],
    cases: &[(usize, usize, usize)],
    seeds: (u64, u64),
) {
    for (f, &(format, dtype)) in formats.iter().enumerate() {
        for (i, &(m, n, k)) in cases.iter().enumerate() {
            let q = packed(format, dtype, seeds.0 + (f * 10 + i) as u64, n, k);
            let x = Rng(seeds.1 + i as u64).vec(m * k, 3.0);
            for kernel in CpuKernel::supported() {
                assert_close_to_reference(&q, &x, m, kernel);
            }
        }
    }
}

#[test]
fn every_format_matches_a_dequantized_reference_within_the_activation_rounding_bound() {
    let cases = [(1, 64, 576), (8, 96, 576), (33, 40, 1536), (5, 7, 1024)];
    assert_every_case_near_the_reference(&FORMATS, &cases, (100, 7));
}

#[test]
fn remainder_rows_and_columns_are_correct() {
    for (format, dtype) in FORMATS {
        let mut seed = 7;
        for n in [1, 2, 3, 5, 6, 7, 9] {
            for m in [1, 2, 3, 5, 6, 7] {
                seed += 1;
                let q = packed(format, dtype, seed, n, 64);
                let x = Rng(seed).vec(m * 64, 1.0);
                assert_close_to_reference(&q, &x, m, CpuKernel::active());
            }
        }
    }
}

/// Every path this CPU has against the portable one, bit for bit, on rows of very different
/// magnitudes (zeros included) for each shape and batch size.
fn assert_every_path_gives_portable_bits(
    formats: &[(WeightFormat, GgmlDType)],
    shapes: &[(usize, usize)],
    batches: &[usize],
    seed: u64,
) {
    let kernels = CpuKernel::supported();
    eprintln!("paths on this CPU: {kernels:?}");
    for &(format, dtype) in formats {
        for (s, &(n, k)) in shapes.iter().enumerate() {
            let q = packed(format, dtype, seed + s as u64, n, k);
            for &m in batches {
                let mut rng = Rng((s * 100 + m) as u64 + seed);
                let mut x: Vec<f32> = (0..m)
                    .flat_map(|r| rng.vec(k, 10f32.powi(r as i32 % 5 - 2)))
                    .collect();
                x[..k.min(40)].fill(0.0);
                let portable = bits(&matmul(&q, &x, m, CpuKernel::Portable));
                for &kernel in &kernels[1..] {
                    let got = bits(&matmul(&q, &x, m, kernel));
                    assert_eq!(got, portable, "{format:?} {kernel} n={n} k={k} m={m}");
                }
            }
        }
    }
}

/// Each row of a batched matmul has the bits of the same row computed alone.
fn assert_rows_independent_of_the_batch(
    formats: &[(WeightFormat, GgmlDType)],
    (n, k): (usize, usize),
    seed: u64,
) {
    for &(format, dtype) in formats {
        let q = packed(format, dtype, seed, n, k);
        let mut rng = Rng(seed + 1);
        // 128 rows of 512 or more reach the parallel activation quantization.
        for m in [3, 4, 5, 17, 64, 128] {
            let x: Vec<f32> = (0..m)
                .flat_map(|r| rng.vec(k, 10f32.powi(r as i32 % 5 - 2)))
                .collect();
            let all = q.matmul(&x, m);
            for r in 0..m {
                let alone = q.matmul(&x[r * k..(r + 1) * k], 1);
                assert_eq!(
                    bits(&alone),
                    bits(&all[r * n..(r + 1) * n]),
                    "{format:?} m={m} row {r}"
                );
            }
        }
    }
}

#[test]
fn every_cpu_path_is_bitwise_equal_to_the_portable_one() {
    let shapes = [(45, 320), (8, 32), (203, 576), (13, 1536), (96, 64)];
    // Every tile height of every path (the AVX-512 tiles take up to eight rows, AMX's
    // sixteen), tails, and batches of several tiles.
    let batches: Vec<usize> = (1..=9).chain([12, 16, 17, 24, 33, 64, 65]).collect();
    assert_every_path_gives_portable_bits(&FORMATS, &shapes, &batches, 40);
}

#[test]
fn requantized_q8_0_weights_are_bitwise_equal_across_paths_too() {
    let (n, k, m) = (45, 320, 11);
    let mut rng = Rng(11);
    let q = QuantMatrix::quantize_q8_0(&rng.vec(n * k, 0.1), n, k).unwrap();
    let x = rng.vec(m * k, 2.0);
    let portable = bits(&matmul(&q, &x, m, CpuKernel::Portable));
    for kernel in CpuKernel::supported() {
        assert_eq!(bits(&matmul(&q, &x, m, kernel)), portable, "{kernel}");
    }
    assert_close_to_reference(&q, &x, m, CpuKernel::active());
}

#[test]
fn each_output_row_is_bitwise_independent_of_the_batch() {
    assert_rows_independent_of_the_batch(&FORMATS, (203, 576), 42);
}

#[test]
fn a_q8_0_quant_of_minus_128_is_read_as_minus_127() {
    // One block of one row: scale 1.0 (f16 0x3C00), quant 0 = −128, the rest 0.
    let mut block = vec![0x00, 0x3C];
    block.extend(std::iter::repeat_n(0u8, 32));
    block[2] = 0x80;
    let q = QuantMatrix::from_ggml(WeightFormat::Q8_0, &block, 1, 32).unwrap();
    let mut row = [0f32; 32];
    q.dequantize_row(0, &mut row);
    assert_eq!(row[0], -127.0);
    let mut x = [0f32; 32];
    x[0] = -1.0;
    for kernel in CpuKernel::supported() {
        assert_eq!(matmul(&q, &x, 1, kernel), vec![127.0], "{kernel}");
    }
}

#[test]
fn widths_not_a_multiple_of_32_and_wrong_lengths_are_refused() {
    assert!(QuantMatrix::quantize_q8_0(&[0.0; 2 * 48], 2, 48).is_none());
    assert!(QuantMatrix::quantize_q8_0(&[0.0; 63], 2, 32).is_none());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q4_1, &[0; 20], 1, 48).is_none());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q4_1, &[0; 39], 2, 32).is_none());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q4_0, &[0; 36], 2, 32).is_some());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q5_0, &[0; 2 * 22], 2, 32).is_some());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q5_0, &[0; 2 * 22], 1, 48).is_none());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q5_0, &[0; 2 * 22 - 1], 2, 32).is_none());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q5_1, &[0; 3 * 24], 3, 32).is_some());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q5_1, &[0; 3 * 22], 3, 32).is_none());
}

#[test]
fn shape_accessors_and_empty_batches() {
    let q = QuantMatrix::quantize_q8_0(&[0.5; 3 * 64], 3, 64).unwrap();
    assert_eq!(
        (q.rows(), q.cols(), q.format()),
        (3, 64, WeightFormat::Q8_0)
    );
    assert!(q.matmul(&[], 0).is_empty());
    assert_eq!(q.matmul(&[0.0; 64], 1), vec![0.0; 3]);
}

#[test]
fn activations_round_half_away_from_zero_on_every_path() {
    // Weight row j picks activation j with weight 127 (f16 scale exactly 1); an activation
    // block with amax 127 has scale 1, so each output is 127 × the quantized activation.
    let k = 32;
    let w: Vec<f32> = (0..k * k)
        .map(|i| if i / k == i % k { 127.0 } else { 0.0 })
        .collect();
    let q = QuantMatrix::quantize_q8_0(&w, k, k).unwrap();
    let mut x = vec![
        127.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        0.499_999_97,
        -0.499_999_97,
        126.5,
        -126.5,
        0.0,
        -0.0,
        3.499_999_8,
        -3.500_000_2,
        64.5,
        -64.5,
        0.7,
        -0.7,
        100.49999,
        1e-30,
    ];
    x.resize(k, 5.5);
    for kernel in CpuKernel::supported() {
        let y = matmul(&q, &x, 1, kernel);
        for (j, v) in x.iter().enumerate() {
            assert_eq!(y[j], 127.0 * v.round(), "{kernel}: {v}");
        }
    }
}

#[test]
fn kernel_names_parse_and_unknown_ones_are_refused() {
    for k in CpuKernel::ALL {
        assert_eq!(k.name().parse::<CpuKernel>(), Ok(k));
    }
    let err = "avx9000".parse::<CpuKernel>().unwrap_err();
    assert!(
        err.contains("portable") && err.contains("avx512_vnni"),
        "{err}"
    );
    assert!(CpuKernel::Portable.is_supported());
    assert!(CpuKernel::supported().contains(&CpuKernel::active()));
}

/// An RMSNorm weight of `k` values around 1, as a file holds it (F32).
fn norm_weight(rng: &mut Rng, k: usize) -> QTensor {
    let w: Vec<f32> = (0..k).map(|_| 1.0 + rng.unit() * 0.5).collect();
    QTensor::quantize(
        &Tensor::from_vec(w, k, &Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap()
}

/// 1 to 80 rows: the last is past the size from which quantization runs on the pool.
#[test]
fn a_norm_fused_into_the_activation_quantization_gives_the_bits_of_normalizing_first() {
    use tokenmill_engine::config::WeightMode;
    use tokenmill_engine::models::layers::{GateUp, Linear, RmsNorm};
    let (k, n) = (1024, 24);
    let norm = RmsNorm::new(norm_weight(&mut Rng(90), k), 1e-6).unwrap();
    let dtypes = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q4K,
        GgmlDType::Q6K,
    ];
    for (i, dtype) in dtypes.into_iter().enumerate() {
        let seed = 91 + 3 * i as u64;
        let weights = |s: u64| ggml_weights(&mut Rng(s), dtype, n, k).1;
        for mode in [WeightMode::Quantized, WeightMode::F32] {
            let (q, v) = (weights(seed), weights(seed + 1));
            let linear = Linear::stacked(&[q, v], mode).unwrap();
            let gate_up = GateUp::new(weights(seed + 2), weights(seed), mode).unwrap();
            // Native pairs take the fused path; f32 weights normalize into the scratch.
            assert_eq!(
                gate_up.is_paired(),
                mode == WeightMode::Quantized,
                "{dtype:?}"
            );
            for m in [1, 3, 9, 80] {
                let x = Rng(m as u64).vec(m * k, 3.0);
                let mut act = QuantizedActivations::default();
                // First the norm alone, then each layer on its output.
                let mut normed = vec![0f32; m * k];
                norm.forward_into(&x, &mut normed);
                let (mut wq, mut wv) = (vec![0f32; m * n], vec![0f32; m * n]);
                linear
                    .forward_split_into(&normed, m, &mut [&mut wq, &mut wv], &mut act)
                    .unwrap();
                let (mut g, mut u, mut want) =
                    (vec![0f32; m * n], vec![0f32; m * n], vec![0f32; m * n]);
                gate_up
                    .forward_into(&normed, m, [&mut g, &mut u], &mut want, &mut act)
                    .unwrap();
                // Fused: the layers take `x` and the norm.
                let mut scratch = vec![f32::NAN; m * k];
                let (mut yq, mut yv) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                linear
                    .forward_normed_split_into(
                        &norm,
                        &x,
                        m,
                        &mut [&mut yq, &mut yv],
                        (&mut scratch, &mut act),
                    )
                    .unwrap();
                let mut got = vec![f32::NAN; m * n];
                gate_up
                    .forward_normed_into(
                        &norm,
                        &x,
                        m,
                        [&mut g, &mut u],
                        &mut got,
                        (&mut scratch, &mut act),
                    )
                    .unwrap();
                let case = format!("{dtype:?} {mode:?} m={m}");
                assert_eq!((bits(&yq), bits(&yv)), (bits(&wq), bits(&wv)), "{case}");
                assert_eq!(bits(&got), bits(&want), "{case}");
            }
        }
    }
}

#[test]
fn outputs_split_inside_a_weight_group_get_the_same_bits_as_one_output() {
    use tokenmill_engine::kernels::quant::QuantizedActivations;
    // Widths 3, 6 and 5: two cuts fall inside four-row weight groups.
    let (k, n, m) = (64, 14, 5);
    let (bytes, _) = ggml_weights(&mut Rng(80), GgmlDType::Q4_1, n, k);
    let w = QuantMatrix::from_ggml(WeightFormat::Q4_1, &bytes, n, k).unwrap();
    let x = Rng(81).vec(m * k, 1.0);
    let whole = w.matmul(&x, m);
    let (mut a, mut b, mut c) = (vec![0f32; m * 3], vec![0f32; m * 6], vec![0f32; m * 5]);
    let mut act = QuantizedActivations::default();
    w.matmul_split_into(&x, m, &mut [&mut a, &mut b, &mut c], &mut act);
    for (r, row) in whole.chunks_exact(n).enumerate() {
        assert_eq!(bits(&row[..3]), bits(&a[r * 3..(r + 1) * 3]), "row {r}");
        assert_eq!(bits(&row[3..9]), bits(&b[r * 6..(r + 1) * 6]), "row {r}");
        assert_eq!(bits(&row[9..]), bits(&c[r * 5..(r + 1) * 5]), "row {r}");
    }
}

/// Widths 40, 24 and 64 (whole weight groups, one pair of groups straddling two outputs),
/// and the residual add, on this process's path against the portable one; 1 to 17 rows.
#[test]
fn split_and_residual_outputs_get_the_bits_of_one_plain_matmul() {
    let (k, n) = (256, 128);
    for (format, dtype) in FORMATS {
        let w = packed(format, dtype, 85, n, k);
        for m in [1, 2, 5, 8, 9, 17] {
            let x = Rng(86 + m as u64).vec(m * k, 1.0);
            let whole = matmul(&w, &x, m, CpuKernel::Portable);
            let (mut a, mut b, mut c) =
                (vec![0f32; m * 40], vec![0f32; m * 24], vec![0f32; m * 64]);
            let mut act = QuantizedActivations::default();
            w.matmul_split_into(&x, m, &mut [&mut a, &mut b, &mut c], &mut act);
            for (r, row) in whole.chunks_exact(n).enumerate() {
                let case = format!("{format:?} m={m} row {r}");
                assert_eq!(bits(&row[..40]), bits(&a[r * 40..(r + 1) * 40]), "{case}");
                assert_eq!(bits(&row[40..64]), bits(&b[r * 24..(r + 1) * 24]), "{case}");
                assert_eq!(bits(&row[64..]), bits(&c[r * 64..(r + 1) * 64]), "{case}");
            }
            // The residual add: each element plus the product, rounded once.
            let base = Rng(87).vec(m * n, 4.0);
            let mut y = base.clone();
            w.matmul_add_into(&x, m, &mut y, &mut act);
            let want: Vec<f32> = base.iter().zip(&whole).map(|(b, p)| b + p).collect();
            assert_eq!(bits(&y), bits(&want), "{format:?} m={m} added");
        }
    }
}

/// A nonlinear combination, so a tile paired with the wrong partner, row or column shows.
fn combine(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
        *o = a * b - a;
    }
}

/// The widest shapes give each task more pairs than one combined run holds.
#[test]
fn paired_matrices_give_the_bits_of_both_matmuls_combined_afterwards() {
    let cases: Vec<_> = FORMATS
        .iter()
        .map(|&f| (f, [(8, 64), (24, 320), (200, 576), (1024, 64)]))
        .chain(
            K_FORMATS
                .iter()
                .map(|&f| (f, [(4, 256), (12, 512), (200, 1536), (1024, 256)])),
        )
        .collect();
    for ((format, dtype), shapes) in cases {
        for (s, (n, k)) in shapes.into_iter().enumerate() {
            let a = packed(format, dtype, 70 + s as u64, n, k);
            let b = packed(format, dtype, 80 + s as u64, n, k);
            let paired = QuantMatrix::interleave_pairs(&a, &b).expect("same shape and format");
            assert_eq!((paired.rows(), paired.cols()), (2 * n, k));
            assert_eq!(paired.weight_bytes(), a.weight_bytes() + b.weight_bytes());
            for m in [1, 3, 4, 5, 17] {
                let x = Rng((s * 10 + m) as u64).vec(m * k, 1.5);
                // Each part alone on the portable path, combined afterwards.
                let (ya, yb) = (
                    matmul(&a, &x, m, CpuKernel::Portable),
                    matmul(&b, &x, m, CpuKernel::Portable),
                );
                let mut want = vec![0f32; m * n];
                combine(&ya, &yb, &mut want);
                // Paired, on this process's path, combined as the tiles are stored.
                let mut got = vec![f32::NAN; m * n];
                let mut act = QuantizedActivations::default();
                paired.matmul_pairs_into(&x, m, &mut got, &mut act, combine);
                assert_eq!(bits(&got), bits(&want), "{format:?} n={n} k={k} m={m}");
            }
        }
    }
}

#[test]
fn only_matrices_of_one_shape_and_format_in_whole_groups_pair() {
    let a = packed(WeightFormat::Q4_0, GgmlDType::Q4_0, 1, 8, 64);
    let wider = packed(WeightFormat::Q4_0, GgmlDType::Q4_0, 2, 8, 96);
    let other = packed(WeightFormat::Q8_0, GgmlDType::Q8_0, 3, 8, 64);
    let ragged = packed(WeightFormat::Q4_0, GgmlDType::Q4_0, 4, 6, 64);
    assert!(QuantMatrix::interleave_pairs(&a, &a).is_some());
    assert!(QuantMatrix::interleave_pairs(&a, &wider).is_none());
    assert!(QuantMatrix::interleave_pairs(&a, &other).is_none());
    assert!(QuantMatrix::interleave_pairs(&ragged, &ragged).is_none());
}
