//! Q5_0 and Q5_1: hand-built blocks of known values and random bytes, on every path.

use super::*;

/// GGUF bytes of one Q5_0 (no `m`) or Q5_1 block holding 5-bit quants `q`, written from
/// ggml's layout as documented (`d`, then `m`, then `qh` with element `e`'s fifth bit at
/// bit `e`, then `qs` with elements `i` and `i + 16` in byte `i`'s low and high nibbles),
/// not from our repacking.
fn q5_block(d: f32, m: Option<f32>, q: &[u8; 32]) -> Vec<u8> {
    let mut bytes = half::f16::from_f32(d).to_le_bytes().to_vec();
    if let Some(m) = m {
        bytes.extend(half::f16::from_f32(m).to_le_bytes());
    }
    let qh = (0..32).fold(0u32, |h, e| h | ((q[e] as u32 >> 4) & 1) << e);
    bytes.extend(qh.to_le_bytes());
    bytes.extend((0..16).map(|i| (q[i] & 0x0F) | (q[i + 16] & 0x0F) << 4));
    bytes
}

/// Hand-built Q5_0 and Q5_1 rows whose every value is known: each row's quants a different
/// permutation of 0..32 (so every fifth bit and nibble occurs once, and a swapped element,
/// nibble half or bit shows), with scales exact in f16. Their rows dequantize to `d·(q − 16)`
/// and `d·q + m`, and on every path an activation of 127 at element `e` alone (a scale of
/// exactly 1, quant 127) gives exactly 127 times weight `e`.
#[test]
fn hand_built_q5_blocks_give_their_known_values_on_every_path() {
    let n = 3;
    let perm =
        |r: usize| -> [u8; 32] { std::array::from_fn(|e| ((7 + 2 * r) * e + 3 * r) as u8 % 32) };
    for (format, has_min) in [(WeightFormat::Q5_0, false), (WeightFormat::Q5_1, true)] {
        let (d, m) = (|r: usize| 0.5 / (1 << r) as f32, |r: usize| -1.0 - r as f32);
        let bytes: Vec<u8> = (0..n)
            .flat_map(|r| q5_block(d(r), has_min.then(|| m(r)), &perm(r)))
            .collect();
        let q = QuantMatrix::from_ggml(format, &bytes, n, 32).unwrap();
        let want: Vec<f32> = (0..n)
            .flat_map(|r| {
                perm(r).map(|q| {
                    if has_min {
                        d(r) * q as f32 + m(r)
                    } else {
                        d(r) * (q as f32 - 16.0)
                    }
                })
            })
            .collect();
        assert_eq!(dequantized(&q), want, "{format:?}");
        // Activation row e: 127 at element e, zeros elsewhere.
        let x: Vec<f32> = (0..32 * 32)
            .map(|i| if i / 32 == i % 32 { 127.0 } else { 0.0 })
            .collect();
        for kernel in CpuKernel::supported() {
            let y = matmul(&q, &x, 32, kernel);
            for e in 0..32 {
                for r in 0..n {
                    let w = want[r * 32 + e];
                    // Q5_1's minimum term is m·Σx = 127·m, the rest 127·d·q: both exact.
                    assert_eq!(y[e * n + r], 127.0 * w, "{format:?} {kernel} row {r} e={e}");
                }
            }
        }
    }
}

/// Q5_0/Q5_1 bytes of `n × k` weights where every quant and fifth bit is random but the
/// f16 `d` (and `m`), kept finite; row 0 is all ones bits (every quant 31): the largest
/// integer sums the kernels can meet.
fn random_q5_bytes(rng: &mut Rng, format: WeightFormat, n: usize, k: usize) -> Vec<u8> {
    let bb = format.ggml_block_bytes();
    let blocks = k / 32;
    let mut bytes: Vec<u8> = (0..n * blocks * bb).map(|_| rng.next_u32() as u8).collect();
    for (b, block) in bytes.chunks_exact_mut(bb).enumerate() {
        if b < blocks {
            block.fill(0xFF);
        }
        let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
        block[0..2].copy_from_slice(&f16(1e-3 + 1e-2 * (rng.unit() + 1.0)));
        if format == WeightFormat::Q5_1 {
            block[2..4].copy_from_slice(&f16(0.05 * rng.unit()));
        }
    }
    bytes
}

#[test]
fn random_byte_q5_blocks_reach_every_value_and_stay_exact_on_every_path() {
    let kernels = CpuKernel::supported();
    for (f, (format, dtype)) in Q5_FORMATS.into_iter().enumerate() {
        // 17 rows: two whole groups and one row of a third; 25 blocks.
        let (n, k) = (17, 800);
        let mut rng = Rng(400 + f as u64);
        let bytes = random_q5_bytes(&mut rng, format, n, k);
        let q = QuantMatrix::from_ggml(format, &bytes, n, k).unwrap();
        let storage = QStorage::from_data(bytes.into(), &Device::Cpu, dtype).unwrap();
        let want = QTensor::new(storage, (n, k))
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(bits(&dequantized(&q)), bits(&want), "{format:?}");
        // Rows of ±1 quantize to ±127 throughout: against row 0's quants of 31, the largest
        // |sums| (32·31·127 per block), which AVX2's i16 stage must not overflow.
        for m in [1, 2, 4, 6, 9] {
            let mut x = vec![1.0; k];
            x.extend(vec![-1.0; k]);
            x.extend((2..9).flat_map(|r| rng.vec(k, 10f32.powi(r - 5))));
            x.truncate(m * k);
            let portable = bits(&matmul(&q, &x, m, CpuKernel::Portable));
            for &kernel in &kernels {
                let got = bits(&matmul(&q, &x, m, kernel));
                assert_eq!(got, portable, "{format:?} {kernel} m={m}");
                assert_close_to_reference(&q, &x, m, kernel);
            }
        }
    }
}

/// Per 32 weights of a row: Q5_0 22 bytes, Q5_1 24, as the file; and a layer loaded from
/// such a tensor keeps them (a Q8_0 requantization would take 34).
#[test]
fn q5_formats_keep_the_files_bits_per_weight_when_loaded() {
    use tokenmill_engine::config::WeightMode;
    use tokenmill_engine::models::layers::Linear;
    let (n, k) = (16, 512);
    for ((format, dtype), want) in Q5_FORMATS.into_iter().zip([22, 24]) {
        let q = packed(format, dtype, 6, n, k);
        assert_eq!(q.weight_bytes(), n * k / 32 * want, "{format:?}");
        assert_eq!(format.ggml_block_bytes(), want, "{format:?}");
        let (_, tensor) = ggml_weights(&mut Rng(6), dtype, n, k);
        let linear = Linear::new(tensor, WeightMode::Quantized).unwrap();
        assert_eq!(linear.weight_bytes(), n * k / 32 * want, "{format:?}");
    }
}
