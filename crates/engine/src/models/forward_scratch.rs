//! `ForwardScratch`: every activation of one forward pass, allocated once and reused, so a
//! steady-state step allocates nothing in the model.

use super::moe_router::ExpertChoice;
use super::sparse_moe_block::{MoeScratch, MoeShape};
use crate::kernels::quant::QuantizedActivations;

/// Buffers sized for the largest batch seen (or reserved); each step uses a prefix.
#[derive(Default)]
pub struct ForwardScratch {
    /// `[T, hidden]` residual stream.
    pub x: Vec<f32>,
    /// `[T, hidden]` normalized input of a projection.
    pub normed: Vec<f32>,
    /// `[T, heads·d]`, `[T, kv_heads·d]`, `[T, kv_heads·d]`.
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// `[T, heads·d]` attention output.
    pub attn: Vec<f32>,
    /// `[T, intermediate]` each.
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub act: Vec<f32>,
    /// `[S + H, hidden]` final hidden states of the rows that sample (or score a prompt),
    /// then of the rows whose hidden states are returned.
    pub last: Vec<f32>,
    /// Which rows sample (or score a prompt).
    pub sample_rows: Vec<usize>,
    /// Which rows' final hidden states are returned (embedding requests).
    pub hidden_rows: Vec<usize>,
    /// Quantized activations, lent to every matmul.
    pub quantized: QuantizedActivations,
    /// The mixture of experts' activations (sparse models only).
    pub moe: MoeScratch,
    /// Per layer, the experts each row of the last step was routed to (`[T, top_k]`, rank
    /// order); empty for dense layers.
    pub routing: Vec<Vec<ExpertChoice>>,
    /// Per layer, how many distinct experts the last step ran; 0 for dense layers.
    pub active_experts: Vec<usize>,
}

/// Widths of the activations, from the model's shape.
#[derive(Debug, Clone, Copy)]
pub struct ScratchShape {
    pub hidden: usize,
    pub q_width: usize,
    pub kv_width: usize,
    pub intermediate: usize,
    /// Width of the gate and up buffers: the intermediate size when some layer's gate/up
    /// is a stacked matmul, 0 when every one is paired (SwiGLU in its epilogue).
    pub gate_up: usize,
    pub layers: usize,
    /// The experts' widths, for a sparse model.
    pub moe: Option<MoeShape>,
}

impl ForwardScratch {
    /// Sets every buffer to `tokens` rows (`samples` for `last`). Growing past what was
    /// reserved allocates; shrinking keeps the capacity.
    pub fn resize(&mut self, shape: ScratchShape, tokens: usize, samples: usize) {
        let ScratchShape {
            hidden,
            q_width,
            kv_width,
            intermediate,
            gate_up,
            layers,
            moe,
        } = shape;
        for (buf, width) in [
            (&mut self.x, hidden),
            (&mut self.normed, hidden),
            (&mut self.q, q_width),
            (&mut self.k, kv_width),
            (&mut self.v, kv_width),
            (&mut self.attn, q_width),
            (&mut self.gate, gate_up),
            (&mut self.up, gate_up),
            (&mut self.act, intermediate),
        ] {
            buf.resize(tokens * width, 0.0);
        }
        self.last.resize(samples * hidden, 0.0);
        if let Some(moe) = moe {
            self.moe.resize(moe, tokens);
            self.routing.resize_with(layers, Vec::new);
            self.active_experts.resize(layers, 0);
            for choices in &mut self.routing {
                choices.reserve((tokens * moe.top_k).saturating_sub(choices.len()));
            }
        }
    }

    /// Reserves room for batches of up to `tokens` tokens, `samples` of them sampling.
    pub fn reserve(&mut self, shape: ScratchShape, tokens: usize, samples: usize) {
        self.resize(shape, tokens, samples);
        self.sample_rows.reserve(samples);
    }
}
