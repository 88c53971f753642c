//! `Q8Matrix`: accuracy against an f32 reference, bitwise batch invariance, and shapes.
//!
//! Tolerance: weights are drawn already Q8_0-representable (`q * d`, max |q| = 127), so
//! requantizing them is exact and the only error is quantizing the activations. Rounding
//! to nearest moves each activation by at most half a step, `amax_block / 254`, so output
//! `j` of row `i` is off by at most `Σ_b amax_x(i, b) / 254 · Σ_{e ∈ b} |w(j, e)|`, plus
//! f32 accumulation rounding that the small relative slack below covers. This bound is
//! per element, so an error in any single element (wrong block, wrong scale, wrong lane)
//! exceeds it.

use tokenmill_engine::models::q8_matrix::Q8Matrix;

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

/// Weights that Q8_0 represents exactly: per 32-block `q * d` with one |q| = 127.
fn representable_weights(rng: &mut Rng, n: usize, k: usize) -> Vec<f32> {
    let mut w = Vec::with_capacity(n * k);
    for _ in 0..n * k / 32 {
        // Power-of-two-ish scales keep q * d exact and amax / 127 == d.
        let d = 0.02 / 127.0 * (1 + rng.next_u32() % 4) as f32;
        for e in 0..32 {
            let q = if e == rng.next_u32() as usize % 32 {
                127
            } else {
                (rng.next_u32() % 255) as i32 - 127
            };
            w.push(q as f32 * d);
        }
        // Guarantee a ±127 entry so the block's scale is exactly `d`.
        let len = w.len();
        if !w[len - 32..]
            .iter()
            .any(|v| (v.abs() - 127.0 * d).abs() == 0.0)
        {
            w[len - 1] = 127.0 * d;
        }
    }
    w
}

/// f64 reference `x · Wᵀ` and the per-element activation-quantization error bound.
fn reference(w: &[f32], x: &[f32], m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0f64; m * n];
    let mut bound = vec![0f64; m * n];
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let mut acc = 0f64;
            let mut err = 0f64;
            for (xb, wb) in xr.chunks(32).zip(wr.chunks(32)) {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                let wabs: f64 = wb.iter().map(|v| v.abs() as f64).sum();
                err += amax / 254.0 * wabs;
                acc += xb
                    .iter()
                    .zip(wb)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>();
            }
            y[i * n + j] = acc;
            bound[i * n + j] = err;
        }
    }
    (y, bound)
}

fn assert_close_to_reference(m: usize, n: usize, k: usize, seed: u64) {
    let mut rng = Rng(seed);
    let w = representable_weights(&mut rng, n, k);
    let x = rng.vec(m * k, 3.0);
    let q = Q8Matrix::quantize(&w, n, k).expect("k is a multiple of 32");
    let got = q.matmul(&x, m);
    assert_eq!(got.len(), m * n);
    let (want, bound) = reference(&w, &x, m, n, k);
    for (idx, ((g, r), b)) in got.iter().zip(&want).zip(&bound).enumerate() {
        let tol = b * 1.001 + 1e-6 * r.abs() + 1e-7;
        assert!(
            (*g as f64 - r).abs() <= tol,
            "m={m} n={n} k={k} element ({}, {}): got {g}, want {r}, tol {tol}",
            idx / n,
            idx % n,
        );
    }
}

fn assert_rows_match_single_row_calls(q: &Q8Matrix, x: &[f32], m: usize) {
    let (n, k) = (q.rows(), q.cols());
    let all = q.matmul(x, m);
    for r in 0..m {
        let alone = q.matmul(&x[r * k..(r + 1) * k], 1);
        let batched = &all[r * n..(r + 1) * n];
        for (j, (a, b)) in alone.iter().zip(batched).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "m={m} row {r} col {j}: {a} alone vs {b} batched"
            );
        }
    }
}

#[test]
fn matches_an_f32_reference_within_the_activation_quantization_bound() {
    for (i, &(m, n, k)) in [(1, 64, 576), (8, 96, 576), (64, 40, 1536), (5, 48, 1024)]
        .iter()
        .enumerate()
    {
        assert_close_to_reference(m, n, k, 0x9e37_79b9 + i as u64);
    }
}

#[test]
fn remainder_rows_and_columns_are_correct() {
    let mut seed = 7;
    for n in [1, 2, 3, 5, 6, 7, 9] {
        for m in [1, 2, 3, 5, 6, 7] {
            seed += 1;
            assert_close_to_reference(m, n, 64, seed);
        }
    }
}

#[test]
fn each_output_row_is_bitwise_independent_of_the_batch() {
    let (n, k) = (203, 576);
    let mut rng = Rng(42);
    let q = Q8Matrix::quantize(&rng.vec(n * k, 0.05), n, k).unwrap();
    for m in [1, 3, 4, 5, 17, 64] {
        // Rows of very different magnitudes: a shared scale would show up immediately.
        let x: Vec<f32> = (0..m)
            .flat_map(|r| rng.vec(k, 10f32.powi(r as i32 % 5 - 2)))
            .collect();
        assert_rows_match_single_row_calls(&q, &x, m);
    }
}

#[test]
fn a_row_gives_the_same_bits_at_every_batch_position() {
    let (n, k) = (37, 96);
    let mut rng = Rng(3);
    let q = Q8Matrix::quantize(&rng.vec(n * k, 1.0), n, k).unwrap();
    let probe = rng.vec(k, 1.0);
    let alone = q.matmul(&probe, 1);
    for (m, pos) in [(2, 1), (4, 3), (5, 4), (9, 8), (9, 2)] {
        let mut x = rng.vec(m * k, 5.0);
        x[pos * k..(pos + 1) * k].copy_from_slice(&probe);
        let got = q.matmul(&x, m);
        let row: Vec<u32> = got[pos * n..(pos + 1) * n]
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let want: Vec<u32> = alone.iter().map(|v| v.to_bits()).collect();
        assert_eq!(row, want, "m={m} position {pos}");
    }
}

#[test]
fn the_portable_kernel_is_bitwise_equal_to_the_dispatched_one() {
    let (n, k, m) = (45, 320, 11);
    let mut rng = Rng(11);
    let q = Q8Matrix::quantize(&rng.vec(n * k, 0.1), n, k).unwrap();
    let x = rng.vec(m * k, 2.0);
    let fast: Vec<u32> = q.matmul(&x, m).iter().map(|v| v.to_bits()).collect();
    let portable: Vec<u32> = q
        .matmul_portable(&x, m)
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(fast, portable);
}

#[test]
fn the_portable_kernel_is_batch_invariant() {
    let (n, k) = (13, 64);
    let mut rng = Rng(5);
    let q = Q8Matrix::quantize(&rng.vec(n * k, 0.1), n, k).unwrap();
    let m = 6;
    let x = rng.vec(m * k, 1.0);
    let all = q.matmul_portable(&x, m);
    for r in 0..m {
        let alone = q.matmul_portable(&x[r * k..(r + 1) * k], 1);
        assert_eq!(
            alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            all[r * n..(r + 1) * n]
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            "row {r}"
        );
    }
}

#[test]
fn requantizing_q8_weights_reproduces_them_exactly() {
    // One-hot activations quantize to q = 127 with d = 1/127, so the output is the weight
    // column times a factor that is the same for every weight of equal scale.
    let (n, k) = (8, 64);
    let mut rng = Rng(17);
    let w = representable_weights(&mut rng, n, k);
    let q = Q8Matrix::quantize(&w, n, k).unwrap();
    let unit = 127f32 * (1.0 / 127.0);
    for col in [0, 31, 32, 63] {
        let mut x = vec![0f32; k];
        x[col] = 1.0;
        let y = q.matmul(&x, 1);
        for j in 0..n {
            let want = w[j * k + col] * unit;
            let rel = (y[j] - want).abs() / want.abs().max(1e-30);
            assert!(
                rel <= 2.0 * f32::EPSILON,
                "row {j} col {col}: {} vs {want}",
                y[j]
            );
        }
    }
}

#[test]
fn widths_not_a_multiple_of_32_are_refused() {
    assert!(Q8Matrix::quantize(&[0.0; 2 * 48], 2, 48).is_none());
    assert!(Q8Matrix::quantize(&[0.0; 31], 1, 31).is_none());
}

#[test]
fn a_weight_slice_of_the_wrong_length_is_refused() {
    assert!(Q8Matrix::quantize(&[0.0; 63], 2, 32).is_none());
}

#[test]
fn shape_accessors_and_empty_batches() {
    let q = Q8Matrix::quantize(&[0.5; 3 * 64], 3, 64).unwrap();
    assert_eq!((q.rows(), q.cols()), (3, 64));
    assert!(q.matmul(&[], 0).is_empty());
    assert_eq!(q.matmul(&[0.0; 64], 1), vec![0.0; 3]);
}

#[test]
fn activations_round_half_away_from_zero_in_both_kernels() {
    // Weight row j picks activation j; an activation block with amax 127 has scale 1, so
    // each output is the quantized activation itself.
    let k = 32;
    let w: Vec<f32> = (0..k * k)
        .map(|i| if i / k == i % k { 1.0 } else { 0.0 })
        .collect();
    let q = Q8Matrix::quantize(&w, k, k).unwrap();
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
    let fast = q.matmul(&x, 1);
    let portable = q.matmul_portable(&x, 1);
    for (j, v) in x.iter().enumerate() {
        assert_eq!(fast[j].to_bits(), portable[j].to_bits(), "activation {v}");
        assert!(
            (fast[j] - v.round()).abs() < 1e-4,
            "activation {v} gave {}",
            fast[j]
        );
    }
}
