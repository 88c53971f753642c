//! `MoeRouter`: picks each token's experts (softmax over the router's logits, top-k,
//! renormalised when the model asks) in a fixed float sequence per token, so routing never
//! depends on what else is in the batch.

use super::layers::for_each_row;
use crate::error::{EngineError, Result};
use candle_core::quantized::QTensor;
use candle_core::Device;

/// One of a token's experts and its routing weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertChoice {
    pub expert: u32,
    pub weight: f32,
}

pub struct MoeRouter {
    /// `[experts, hidden]`, kept in f32: a few hundred kilobytes, and exact.
    weight: Vec<f32>,
    hidden: usize,
    num_experts: usize,
    top_k: usize,
    norm_topk_prob: bool,
}

/// How the router picks: `top_k` experts, their weights renormalised or not.
#[derive(Debug, Clone, Copy)]
pub struct RouterShape {
    pub num_experts: usize,
    pub hidden: usize,
    pub top_k: usize,
    pub norm_topk_prob: bool,
}

impl MoeRouter {
    /// `weight`: `[experts, hidden]` (`ffn_gate_inp`), in any format; it is widened to f32.
    pub fn new(weight: &QTensor, shape: RouterShape) -> Result<Self> {
        let dims = weight.shape().dims();
        if dims != [shape.num_experts, shape.hidden]
            || shape.top_k == 0
            || shape.top_k > shape.num_experts
        {
            return Err(EngineError::Unsupported(format!(
                "router of shape {dims:?} for {} experts of width {}, top {}",
                shape.num_experts, shape.hidden, shape.top_k
            )));
        }
        let weight = weight
            .dequantize(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        Ok(Self {
            weight,
            hidden: shape.hidden,
            num_experts: shape.num_experts,
            top_k: shape.top_k,
            norm_topk_prob: shape.norm_topk_prob,
        })
    }

    pub fn num_experts(&self) -> usize {
        self.num_experts
    }

    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// Routes every row of `x` (`[T, hidden]`): `probs` is scratch of `[T, experts]`, and
    /// `choices` receives `[T, top_k]`, each token's experts by descending probability
    /// (the lower index first on a tie).
    pub fn route(&self, x: &[f32], probs: &mut [f32], choices: &mut Vec<ExpertChoice>) {
        let (e, k) = (self.num_experts, self.top_k);
        // 1. probs = softmax(x · Wᵀ), row by row: [T, experts]
        for_each_row(probs, e, |t, row| {
            let token = &x[t * self.hidden..(t + 1) * self.hidden];
            for (p, w) in row.iter_mut().zip(self.weight.chunks_exact(self.hidden)) {
                *p = dot(token, w);
            }
            softmax_inplace(row);
        });
        // 2. The top k of each row, weights renormalised to sum to 1 when asked.
        choices.clear();
        for row in probs.chunks_exact(e) {
            let start = choices.len();
            for _ in 0..k {
                let best = (0..e)
                    .filter(|&i| !choices[start..].iter().any(|c| c.expert as usize == i))
                    .fold(None, |b: Option<usize>, i| match b {
                        Some(b) if row[b] >= row[i] => Some(b),
                        _ => Some(i),
                    })
                    .expect("top_k ≤ experts, checked at load");
                choices.push(ExpertChoice {
                    expert: best as u32,
                    weight: row[best],
                });
            }
            if self.norm_topk_prob {
                let picked = &mut choices[start..];
                let sum: f32 = picked.iter().map(|c| c.weight).sum();
                picked.iter_mut().for_each(|c| c.weight /= sum);
            }
        }
    }
}

/// `Σ aᵢ·bᵢ` in eight interleaved partial sums, added in one fixed order: vectorizes, and
/// gives the same bits for a row whatever else is computed.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

fn softmax_inplace(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    row.iter_mut().for_each(|v| *v /= sum);
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::GgmlDType;
    use candle_core::Tensor;

    fn router(weights: Vec<f32>, experts: usize, top_k: usize, norm: bool) -> MoeRouter {
        let hidden = weights.len() / experts;
        let t = Tensor::from_vec(weights, (experts, hidden), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&t, GgmlDType::F32).unwrap();
        let shape = RouterShape {
            num_experts: experts,
            hidden,
            top_k,
            norm_topk_prob: norm,
        };
        MoeRouter::new(&q, shape).unwrap()
    }

    /// Hidden 1, input 1: the logits are the weights themselves.
    fn route(r: &MoeRouter) -> Vec<ExpertChoice> {
        let mut probs = vec![0.0; r.num_experts()];
        let mut choices = Vec::new();
        r.route(&[1.0], &mut probs, &mut choices);
        choices
    }

    #[test]
    fn the_top_two_come_by_descending_probability_and_renormalised_sum_to_one() {
        let choices = route(&router(vec![0.1, 2.0, -1.0, 1.0], 4, 2, true));
        assert_eq!(choices.iter().map(|c| c.expert).collect::<Vec<_>>(), [1, 3]);
        let e = (1f32).exp();
        assert!((choices[0].weight - e / (e + 1.0)).abs() < 1e-6);
        assert!((choices[0].weight + choices[1].weight - 1.0).abs() < 1e-6);
    }

    #[test]
    fn without_norm_topk_prob_the_weights_are_the_softmax_probabilities() {
        let logits = [0.1f32, 2.0, -1.0, 1.0];
        let choices = route(&router(logits.to_vec(), 4, 2, false));
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((choices[0].weight - 2f32.exp() / z).abs() < 1e-6);
        assert!((choices[1].weight - 1f32.exp() / z).abs() < 1e-6);
    }

    #[test]
    fn equal_probabilities_pick_the_lower_expert_first() {
        let choices = route(&router(vec![0.5, 1.0, 1.0, 1.0], 4, 2, true));
        assert_eq!(choices.iter().map(|c| c.expert).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn a_router_whose_shape_does_not_match_the_model_is_refused() {
        let t = Tensor::zeros((3, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let q = QTensor::quantize(&t, GgmlDType::F32).unwrap();
        let shape = RouterShape {
            num_experts: 4,
            hidden: 4,
            top_k: 2,
            norm_topk_prob: true,
        };
        assert!(MoeRouter::new(&q, shape).is_err());
    }
}
