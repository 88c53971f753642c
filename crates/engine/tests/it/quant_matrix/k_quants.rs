//! The K-quants (Q4_K, Q5_K, Q6_K): read as candle reads them, near the reference, bit for
//! bit across paths and batches, at every byte value.

use super::*;

#[test]
fn k_quant_rows_dequantize_to_exactly_what_candle_reads_from_the_same_bytes() {
    // n = 7: a partial row group; k = 768: three super-blocks.
    assert_dequantizes_like_candle(&K_FORMATS, (7, 768), 3);
}

#[test]
fn k_quants_keep_about_the_files_bits_per_weight() {
    // Per 256 weights of a row: Q4K 148 bytes (file 144), Q5K 180 (176), Q6K 210 (210).
    let (n, k) = (8, 512);
    for ((format, dtype), want) in K_FORMATS.into_iter().zip([148, 180, 210]) {
        let q = packed(format, dtype, 5, n, k);
        assert_eq!(q.weight_bytes(), n * k / 256 * want, "{format:?}");
    }
}

#[test]
fn every_cpu_path_is_bitwise_equal_to_the_portable_one_for_k_quants() {
    let shapes = [(45, 256), (8, 512), (203, 1536), (13, 768), (5, 2048)];
    let batches: Vec<usize> = (1..=9).chain([12, 16, 17, 24, 33]).collect();
    assert_every_path_gives_portable_bits(&K_FORMATS, &shapes, &batches, 60);
}

#[test]
fn k_quants_match_a_dequantized_reference_within_the_activation_rounding_bound() {
    let cases = [(1, 64, 256), (8, 96, 1536), (33, 40, 512), (5, 7, 1024)];
    assert_every_case_near_the_reference(&K_FORMATS, &cases, (200, 17));
}

#[test]
fn k_quant_output_rows_are_bitwise_independent_of_the_batch() {
    assert_rows_independent_of_the_batch(&K_FORMATS, (203, 512), 44);
}

#[test]
fn k_quant_widths_not_a_multiple_of_256_and_wrong_lengths_are_refused() {
    assert!(QuantMatrix::from_ggml(WeightFormat::Q4K, &[0; 144], 1, 256).is_some());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q6K, &[0; 2 * 210], 2, 256).is_some());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q4K, &[0; 144], 1, 128).is_none());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q5K, &[0; 175], 1, 256).is_none());
    assert!(QuantMatrix::from_ggml(WeightFormat::Q6K, &[0; 210], 2, 256).is_none());
}

/// K-quant bytes of `n × k` weights where every field is random (so every quant, high bit
/// and sub-scale value occurs, Q6K's −128 scale included) except the f16 `d`/`dmin`, kept
/// finite; row 0 is all ones bits (every quant and 6-bit scale at its maximum, Q6K's
/// scales −128): the largest integer sums the kernels can meet.
fn random_k_bytes(rng: &mut Rng, format: WeightFormat, n: usize, k: usize) -> Vec<u8> {
    let bb = format.ggml_block_bytes();
    let supers = k / 256;
    let mut bytes: Vec<u8> = (0..n * supers * bb).map(|_| rng.next_u32() as u8).collect();
    for (b, block) in bytes.chunks_exact_mut(bb).enumerate() {
        if b < supers {
            block.fill(0xFF);
        }
        let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
        let d = 1e-3 + 1e-2 * (rng.unit() + 1.0);
        match format {
            WeightFormat::Q6K => {
                if b < supers {
                    block[192..208].fill(0x80);
                }
                block[208..210].copy_from_slice(&f16(d));
            }
            _ => {
                block[0..2].copy_from_slice(&f16(d));
                block[2..4].copy_from_slice(&f16(d * 0.5));
            }
        }
    }
    bytes
}

#[test]
fn random_byte_k_quant_blocks_reach_every_value_and_stay_exact_on_every_path() {
    let kernels = CpuKernel::supported();
    for (f, (format, dtype)) in K_FORMATS.into_iter().enumerate() {
        let (n, k) = (9, 768);
        let mut rng = Rng(300 + f as u64);
        let bytes = random_k_bytes(&mut rng, format, n, k);
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
        // Rows of ±1 quantize to ±127 throughout: with row 0's maximal quants, the largest
        // |sums| (Q6K: 2·128·16·31·127 per block, just under 2²⁴).
        let m = 6;
        let mut x = vec![1.0; k];
        x.extend(vec![-1.0; k]);
        x.extend((2..m).flat_map(|r| rng.vec(k, 10f32.powi(r as i32 - 3))));
        let portable = bits(&matmul(&q, &x, m, CpuKernel::Portable));
        for &kernel in &kernels {
            assert_eq!(
                bits(&matmul(&q, &x, m, kernel)),
                portable,
                "{format:?} {kernel}"
            );
            assert_close_to_reference(&q, &x, m, kernel);
        }
    }
}

#[test]
fn stacked_projections_in_different_k_quants_each_run_in_their_own_bits() {
    use tokenmill_engine::config::WeightMode;
    use tokenmill_engine::kernels::quant::QuantizedActivations;
    use tokenmill_engine::models::layers::Linear;
    // Q and V as a Q4_K_M file may hold them: Q4K beside Q6K.
    let (k, m, nq, nv) = (512, 3, 8, 5);
    let (q_bytes, q_tensor) = ggml_weights(&mut Rng(70), GgmlDType::Q4K, nq, k);
    let (v_bytes, v_tensor) = ggml_weights(&mut Rng(71), GgmlDType::Q6K, nv, k);
    let linear = Linear::stacked(&[q_tensor, v_tensor], WeightMode::Quantized).unwrap();
    let q = QuantMatrix::from_ggml(WeightFormat::Q4K, &q_bytes, nq, k).unwrap();
    let v = QuantMatrix::from_ggml(WeightFormat::Q6K, &v_bytes, nv, k).unwrap();
    let x = Rng(72).vec(m * k, 1.0);
    let (want_q, want_v) = (q.matmul(&x, m), v.matmul(&x, m));
    let mut act = QuantizedActivations::default();
    let (mut yq, mut yv) = (vec![0f32; m * nq], vec![0f32; m * nv]);
    linear
        .forward_split_into(&x, m, &mut [&mut yq, &mut yv], &mut act)
        .unwrap();
    assert_eq!((bits(&yq), bits(&yv)), (bits(&want_q), bits(&want_v)));
    // Into one output: the two results side by side.
    let mut y = vec![0f32; m * (nq + nv)];
    linear.forward_into(&x, m, &mut y, &mut act).unwrap();
    for (r, row) in y.chunks_exact(nq + nv).enumerate() {
        assert_eq!(bits(&row[..nq]), bits(&want_q[r * nq..(r + 1) * nq]));
        assert_eq!(bits(&row[nq..]), bits(&want_v[r * nv..(r + 1) * nv]));
    }
}
