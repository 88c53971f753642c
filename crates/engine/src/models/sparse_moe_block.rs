//! `SparseMoeBlock`: Qwen3-MoE's mixture of experts in place of a dense MLP. A step's rows
//! are grouped by expert and each active expert runs one matmul over its rows (a grouped
//! GEMM), so its weights are read once per step however many tokens chose it.
//!
//! Batch invariance: the router computes each row alone ([`MoeRouter`]), an expert's matmul
//! gives a row the same bits however many rows go through it (`QuantMatrix` is per-row
//! exact, ARCHITECTURE.md), and a token's expert outputs are summed by rank in its top-k,
//! never by the order experts ran in.

use super::layers::{GateUp, Linear};
use super::moe_router::{ExpertChoice, MoeRouter, RouterShape};
use crate::config::model_config::ModelConfig;
use crate::config::WeightMode;
use crate::error::{EngineError, Result};
use crate::kernels::quant::QuantizedActivations;
use crate::models::checkpoint::Checkpoint;
use candle_core::quantized::{QStorage, QTensor};
use candle_core::Device;
use std::borrow::Cow;

pub struct SparseMoeBlock {
    router: MoeRouter,
    experts: Vec<Expert>,
    hidden: usize,
    intermediate: usize,
}

/// One expert's SwiGLU FFN.
struct Expert {
    /// Gate and up projections (`[intermediate, hidden]` each) with SwiGLU.
    gate_up: GateUp,
    /// `[hidden, intermediate]`.
    down: Linear,
}

/// The widths the block's activations need.
#[derive(Debug, Clone, Copy)]
pub struct MoeShape {
    pub hidden: usize,
    pub num_experts: usize,
    pub top_k: usize,
    pub intermediate: usize,
}

/// The block's activations, reused step after step.
#[derive(Default)]
pub struct MoeScratch {
    /// `[T, experts]` router probabilities.
    probs: Vec<f32>,
    /// Per expert, the assignments (`token · top_k + rank`) routed to it, ascending.
    assigned: Vec<Vec<u32>>,
    /// `[n, hidden]` the rows one expert takes, gathered.
    gathered: Vec<f32>,
    /// `[n, intermediate]` each.
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    /// `[n, hidden]` one expert's outputs.
    expert_out: Vec<f32>,
    /// `[T, top_k, hidden]` every assignment's expert output, by token then rank.
    outputs: Vec<f32>,
}

impl MoeScratch {
    /// Sizes every buffer for `tokens` rows; shrinking keeps the capacity.
    pub fn resize(&mut self, shape: MoeShape, tokens: usize) {
        let MoeShape {
            hidden,
            num_experts,
            top_k,
            intermediate,
        } = shape;
        self.probs.resize(tokens * num_experts, 0.0);
        self.assigned.resize_with(num_experts, Vec::new);
        for rows in &mut self.assigned {
            rows.reserve(tokens.saturating_sub(rows.len()));
        }
        for (buf, width) in [
            (&mut self.gathered, hidden),
            (&mut self.gate, intermediate),
            (&mut self.up, intermediate),
            (&mut self.act, intermediate),
            (&mut self.expert_out, hidden),
            (&mut self.outputs, top_k * hidden),
        ] {
            buf.resize(tokens * width, 0.0);
        }
    }
}

impl SparseMoeBlock {
    /// Layer `layer`'s router (`ffn_gate_inp`) and stacked experts (`ffn_{gate,up,down}_exps`,
    /// `[experts, out, in]`), which must match the config's shape.
    pub fn load(
        ckpt: &mut dyn Checkpoint,
        layer: usize,
        config: &ModelConfig,
        mode: WeightMode,
    ) -> Result<Self> {
        let moe = config.moe.as_ref().ok_or_else(|| {
            EngineError::Unsupported(format!("layer {layer} is sparse in a dense model"))
        })?;
        let (h, e, ff) = (
            config.hidden_size,
            moe.num_experts,
            moe.expert_intermediate_size,
        );
        let name = |leaf: &str| format!("blk.{layer}.{leaf}.weight");
        let router = MoeRouter::new(
            &ckpt.tensor(&name("ffn_gate_inp"), &[e, h])?,
            RouterShape {
                num_experts: e,
                hidden: h,
                top_k: moe.experts_per_token,
                norm_topk_prob: moe.norm_topk_prob,
            },
        )?;
        let gate = split_experts(&ckpt.tensor(&name("ffn_gate_exps"), &[e, ff, h])?)?;
        let up = split_experts(&ckpt.tensor(&name("ffn_up_exps"), &[e, ff, h])?)?;
        let down = split_experts(&ckpt.tensor(&name("ffn_down_exps"), &[e, h, ff])?)?;
        let experts = gate
            .into_iter()
            .zip(up)
            .zip(down)
            .map(|((g, u), d)| {
                Ok(Expert {
                    gate_up: GateUp::new(g, u, mode)?,
                    down: Linear::new(d, mode)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            router,
            experts,
            hidden: h,
            intermediate: ff,
        })
    }

    pub fn shape(&self) -> MoeShape {
        MoeShape {
            hidden: self.hidden,
            num_experts: self.router.num_experts(),
            top_k: self.router.top_k(),
            intermediate: self.intermediate,
        }
    }

    /// `x += Σ_rank weight · expert(h)` over each token's top-k experts, `h` = `normed`
    /// (`[T, hidden]`). `choices` receives the routing, `[T, top_k]` in rank order. Returns
    /// how many distinct experts ran (each read its weights once).
    pub fn forward_add_into(
        &self,
        normed: &[f32],
        x: &mut [f32],
        choices: &mut Vec<ExpertChoice>,
        s: &mut MoeScratch,
        act: &mut QuantizedActivations,
    ) -> Result<usize> {
        let (h, k) = (self.hidden, self.router.top_k());
        let t = normed.len() / h;
        // 1. Route: choices [T, top_k]
        let probs = &mut s.probs[..t * self.router.num_experts()];
        self.router.route(normed, probs, choices);
        // 2. Group the assignments by expert, in ascending assignment order.
        s.assigned.iter_mut().for_each(Vec::clear);
        for (a, c) in choices.iter().enumerate() {
            s.assigned[c.expert as usize].push(a as u32);
        }
        // 3. Each active expert once over its rows: gather [n, hidden] → gate/up [n, ff]
        //    → SwiGLU → down [n, hidden] → scattered to outputs[token, rank].
        let mut active = 0;
        for (expert, assigned) in self.experts.iter().zip(&s.assigned) {
            let n = assigned.len();
            if n == 0 {
                continue;
            }
            active += 1;
            let gathered = &mut s.gathered[..n * h];
            for (dst, &a) in gathered.chunks_exact_mut(h).zip(assigned) {
                let token = a as usize / k;
                dst.copy_from_slice(&normed[token * h..(token + 1) * h]);
            }
            let width = n * self.intermediate;
            let halves = [&mut s.gate[..width], &mut s.up[..width]];
            expert
                .gate_up
                .forward_into(gathered, n, halves, &mut s.act[..width], act)?;
            let out = &mut s.expert_out[..n * h];
            expert.down.forward_into(&s.act[..width], n, out, act)?;
            for (src, &a) in out.chunks_exact(h).zip(assigned) {
                let a = a as usize;
                s.outputs[a * h..(a + 1) * h].copy_from_slice(src);
            }
        }
        // 4. Per token, the weighted outputs summed by rank, then added to the residual.
        for ((row, outs), picked) in x
            .chunks_exact_mut(h)
            .zip(s.outputs.chunks_exact_mut(k * h))
            .zip(choices.chunks_exact(k))
        {
            let (sum, rest) = outs.split_at_mut(h);
            sum.iter_mut().for_each(|v| *v *= picked[0].weight);
            for (out, c) in rest.chunks_exact(h).zip(&picked[1..]) {
                sum.iter_mut()
                    .zip(out)
                    .for_each(|(acc, o)| *acc += c.weight * o);
            }
            row.iter_mut().zip(sum.iter()).for_each(|(v, m)| *v += m);
        }
        Ok(active)
    }
}

/// A stacked `[experts, out, in]` tensor as one `[out, in]` tensor per expert, each in the
/// file's own bits (an expert's rows are contiguous, whole blocks included).
fn split_experts(stacked: &QTensor) -> Result<Vec<QTensor>> {
    let dims = stacked.shape().dims().to_vec();
    let [experts, out, inp] = dims[..] else {
        return Err(EngineError::Unsupported(format!(
            "stacked experts of shape {dims:?}, expected [experts, out, in]"
        )));
    };
    let data = stacked.data()?;
    if experts == 0 || !data.len().is_multiple_of(experts) {
        return Err(EngineError::Unsupported(format!(
            "stacked experts of shape {dims:?} do not split into {experts} equal parts"
        )));
    }
    data.chunks_exact(data.len() / experts)
        .map(|bytes| {
            let storage = QStorage::from_data(Cow::Borrowed(bytes), &Device::Cpu, stacked.dtype())?;
            Ok(QTensor::new(storage, (out, inp))?)
        })
        .collect()
}
