//! Building blocks shared by every model: linear layers, RMSNorm, rotary embeddings.
//!
//! Activations are plain row-major `f32` slices `[rows, width]`; only matmuls go through
//! candle, so the rest of the forward pass reads as ordinary loops.

mod embedding;
mod for_each_row;
mod gate_up;
mod gated_activation;
mod linear;
mod rms_norm;
mod rope;

pub use embedding::*;
pub(crate) use for_each_row::for_each_row;
pub use gate_up::*;
pub use gated_activation::*;
pub use linear::*;
pub use rms_norm::*;
pub use rope::*;

#[cfg(test)]
mod tests {
    use super::gate_up::GateUpWeight;
    use super::gated_activation::{geglu_row, geglu_slice, swiglu_row, swiglu_slice};
    use super::rope::Turn;
    use super::*;
    use crate::config::model_config::RopeStyle;
    use crate::config::WeightMode;

    use crate::kernels::cpu_kernel::CpuKernel;
    use crate::kernels::exp::exp;
    use crate::kernels::quant::QuantizedActivations;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    /// `exp` reads its power of two from the rounding constant's mantissa bits; taking it
    /// with a float→int conversion instead gives the same bits for every input, NaN and the
    /// clamped ranges included (a sweep over every 251st f32 bit pattern).
    #[test]
    fn exp_takes_its_exponent_from_the_rounding_bits_exactly_as_a_conversion_would() {
        fn by_conversion(x: f32) -> f32 {
            const ROUND: f32 = 12_582_912.0;
            let x = x.clamp(-87.0, 88.0);
            let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
            let r = (x - n * 0.693_145_75) - n * 1.428_606_8e-6;
            let mut p = 1.0 / 720.0;
            for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
                p = p * r + c;
            }
            p * f32::from_bits(((n as i32 + 127) as u32) << 23)
        }
        for bits in (0..=u32::MAX)
            .step_by(251)
            .chain([0x7F80_0000, 0xFF80_0000])
        {
            let x = f32::from_bits(bits);
            let (got, want) = (exp(x), by_conversion(x));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "exp({x:e}) = {got:e}, by conversion {want:e}"
            );
        }
    }

    /// `[n, k]` weights quantized by candle into `dtype`.
    fn qtensor(n: usize, k: usize, seed: u32, dtype: GgmlDType) -> QTensor {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .collect();
        let t = Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    }

    #[test]
    fn gate_up_paired_gives_the_bits_of_a_stacked_matmul_then_swiglu() {
        let (n, k) = (64, 96);
        for dtype in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
        ] {
            let gate_up = GateUp::new(
                qtensor(n, k, 1, dtype),
                qtensor(n, k, 2, dtype),
                WeightMode::Quantized,
            )
            .unwrap();
            assert!(
                matches!(gate_up.weight, GateUpWeight::Paired(_)),
                "{dtype:?}"
            );
            let stacked = Linear::stacked(
                &[qtensor(n, k, 1, dtype), qtensor(n, k, 2, dtype)],
                WeightMode::Quantized,
            )
            .unwrap();
            for m in [1, 5, 16] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0)
                    .collect();
                let mut act = QuantizedActivations::default();
                let (mut g, mut u, mut want) =
                    (vec![0.0; m * n], vec![0.0; m * n], vec![0.0; m * n]);
                stacked
                    .forward_split_into(&x, m, &mut [&mut g[..], &mut u[..]], &mut act)
                    .unwrap();
                swiglu_into(&g, &u, &mut want, n);
                let mut got = vec![f32::NAN; m * n];
                // The paired layout never touches the gate/up scratch.
                let (mut sg, mut su) = (Vec::new(), Vec::new());
                gate_up
                    .forward_into(&x, m, [&mut sg[..], &mut su[..]], &mut got, &mut act)
                    .unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{dtype:?} m={m}");
            }
        }
    }

    #[test]
    fn gate_up_whose_rows_are_not_whole_groups_stays_stacked_and_equal() {
        let (n, k) = (6, 64);
        let gate_up = GateUp::new(
            qtensor(n, k, 3, GgmlDType::Q4_0),
            qtensor(n, k, 4, GgmlDType::Q4_0),
            WeightMode::Quantized,
        )
        .unwrap();
        assert!(matches!(gate_up.weight, GateUpWeight::Stacked(_)));
        let x: Vec<f32> = (0..2 * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let (mut g, mut u, mut out) = (vec![0.0; 2 * n], vec![0.0; 2 * n], vec![f32::NAN; 2 * n]);
        gate_up
            .forward_into(
                &x,
                2,
                [&mut g[..], &mut u[..]],
                &mut out,
                &mut QuantizedActivations::default(),
            )
            .unwrap();
        let mut want = vec![0.0; 2 * n];
        swiglu_into(&g, &u, &mut want, n);
        assert_eq!(out, want);
    }

    #[test]
    fn norms_and_rope_give_the_portable_bits_on_every_kernel_this_cpu_runs() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut seed = 0x2545_F491_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32 - 0.5) * 8.0
        };
        // Widths with tails past every vector width; head dims of the models we run.
        for width in [1024, 576, 100, 7] {
            let norm = RmsNorm {
                weight: (0..width).map(|_| next()).collect(),
                eps: 1e-6,
            };
            let x: Vec<f32> = (0..width).map(|_| next()).collect();
            let mut want = vec![0.0; width];
            norm.norm_row(Some(&x), &mut want, CpuKernel::Portable);
            for kernel in CpuKernel::supported() {
                let (mut into, mut inplace) = (vec![f32::NAN; width], x.clone());
                norm.norm_row(Some(&x), &mut into, kernel);
                norm.norm_row(None, &mut inplace, kernel);
                assert_eq!(
                    bits(&into),
                    bits(&want),
                    "{kernel} norm into, width {width}"
                );
                assert_eq!(
                    bits(&inplace),
                    bits(&want),
                    "{kernel} norm in place, width {width}"
                );
            }
        }
        for (style, head_dim) in [
            (RopeStyle::HalfSplit, 128),
            (RopeStyle::AdjacentPairs, 64),
            (RopeStyle::HalfSplit, 10),
        ] {
            let (cos, sin): (Vec<f32>, Vec<f32>) =
                (0..head_dim / 2).map(|_| (next(), next())).unzip();
            let turn = Turn {
                style,
                head_dim,
                cos: &cos,
                sin: &sin,
            };
            let x: Vec<f32> = (0..3 * head_dim).map(|_| next()).collect();
            let mut want = x.clone();
            turn.rotate_on(CpuKernel::Portable, &mut want);
            for kernel in CpuKernel::supported() {
                let mut got = x.clone();
                turn.rotate_on(kernel, &mut got);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{kernel} {style:?} rope, head dim {head_dim}"
                );
            }
        }
    }

    /// Qwen3's per-head norm folded into RoPE's pass gives the bits of normalizing every
    /// head first and rotating after, row by row at each row's position.
    #[test]
    fn rope_with_a_head_norm_equals_the_norm_then_the_rotation() {
        let (head_dim, heads, rows, max_pos) = (16, 3, 5, 9);
        let half = head_dim / 2;
        let wave = |i: usize| ((i as f32) * 0.37).sin();
        let rope = Rope {
            style: RopeStyle::HalfSplit,
            head_dim,
            cos: (0..max_pos * half).map(|i| wave(i).abs()).collect(),
            sin: (0..max_pos * half).map(|i| wave(i + 7)).collect(),
        };
        let norm = RmsNorm {
            weight: (0..head_dim).map(|i| 1.0 + wave(i + 3)).collect(),
            eps: 1e-6,
        };
        let positions = [4, 0, 8, 3, 3];
        let x: Vec<f32> = (0..rows * heads * head_dim)
            .map(|i| wave(i) * 5.0)
            .collect();
        let mut fused = x.clone();
        rope.apply(&mut fused, &positions, Some(&norm));
        let mut apart = x;
        norm.forward_inplace(&mut apart);
        rope.apply(&mut apart, &positions, None);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fused), bits(&apart));
    }

    #[test]
    fn swiglu_and_geglu_give_the_scalar_bits_on_every_kernel_this_cpu_runs() {
        // Ordinary values, both ends of exp's clamp, overflow, tiny and signed zeros, NaN
        // and infinities, odd lengths (every vector width leaves a tail).
        let mut gate = vec![
            0.0f32, -0.0, 1e-30, -1e-30, 88.5, -88.5, 200.0, -200.0, 3e38,
        ];
        gate.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40]);
        let mut seed = 0x9E37_79B9_u32;
        for _ in 0..1021 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            gate.push((seed as f32 / u32::MAX as f32 - 0.5) * 40.0);
        }
        let up: Vec<f32> = gate.iter().map(|g| 0.75 - g * 0.01).collect();
        for n in [gate.len(), 23, 7, 1] {
            let (mut scalar, mut scalar_gelu) = (vec![0.0; n], vec![0.0; n]);
            swiglu_row(&gate[..n], &up[..n], &mut scalar);
            geglu_row(&gate[..n], &up[..n], &mut scalar_gelu);
            for kernel in CpuKernel::supported() {
                let (mut wide, mut wide_gelu) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                swiglu_slice(&gate[..n], &up[..n], &mut wide, kernel);
                geglu_slice(&gate[..n], &up[..n], &mut wide_gelu, kernel);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&scalar), bits(&wide), "{kernel}, length {n}");
                assert_eq!(
                    bits(&scalar_gelu),
                    bits(&wide_gelu),
                    "{kernel} GeGLU, length {n}"
                );
            }
        }
    }

    /// GeGLU's exp form is transformers' `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
    /// to f32 rounding, across the range an MLP sees and out at the clamps.
    #[test]
    fn geglu_equals_the_tanh_form_of_gelu_times_up() {
        let gate: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.01).collect();
        let up: Vec<f32> = gate.iter().map(|g| 1.5 - g * 0.1).collect();
        let mut ours = vec![0.0; gate.len()];
        geglu_row(&gate, &up, &mut ours);
        for ((&g, &u), &got) in gate.iter().zip(&up).zip(&ours) {
            let (g64, u64) = (g as f64, u as f64);
            let a = (2.0 / std::f64::consts::PI).sqrt() * (g64 + 0.044715 * g64.powi(3));
            let want = 0.5 * g64 * (1.0 + a.tanh()) * u64;
            assert!(
                (got as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
                "gelu_tanh({g}) · {u}: {got} vs {want}"
            );
        }
    }
}
