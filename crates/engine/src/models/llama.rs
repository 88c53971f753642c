//! The Llama family's decoder (Llama 2/3, SmolLM2, Mistral-shaped) and Qwen3 dense, which
//! is the same network plus an RMSNorm on each query and key head.
//!
//! Tensor names follow GGUF (`blk.N.attn_q.weight`); other formats are mapped at load.

use super::layers::{
    add_inplace, split_columns, swiglu_inplace, Linear, RmsNorm, Rope, WeightMode,
};
use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::forward_batch::ForwardBatch;
use crate::kv_cache::KvCache;
use crate::model_config::ModelConfig;
use crate::paged_attention::{paged_attention, AttentionShape};
use candle_core::Device;

pub struct Llama {
    config: ModelConfig,
    /// `[vocab, hidden]`, dequantized once: a lookup reads one row per token.
    token_embd: Vec<f32>,
    blocks: Vec<Block>,
    output_norm: RmsNorm,
    output: Linear,
    rope: Rope,
}

struct Block {
    attn_norm: RmsNorm,
    /// Q, K and V projections stacked: `[heads*d + 2*kv_heads*d, hidden]`.
    attn_qkv: Linear,
    attn_q_norm: Option<RmsNorm>,
    attn_k_norm: Option<RmsNorm>,
    attn_output: Linear,
    ffn_norm: RmsNorm,
    /// Gate and up projections stacked: `[2*intermediate, hidden]`.
    ffn_gate_up: Linear,
    ffn_down: Linear,
}

impl Llama {
    pub fn load(ckpt: &mut dyn Checkpoint, mode: WeightMode, max_positions: usize) -> Result<Self> {
        let c = ckpt.config().clone();
        let (h, q_width, kv_width) = (
            c.hidden_size,
            c.num_heads * c.head_dim,
            c.num_kv_heads * c.head_dim,
        );
        let embd = ckpt.tensor("token_embd.weight", &[c.vocab_size, h])?;
        let output = if ckpt.has_tensor("output.weight") {
            Linear::new(ckpt.tensor("output.weight", &[c.vocab_size, h])?, mode)?
        } else {
            Linear::new(embd.clone_for_tie()?, mode)?
        };
        let token_embd = embd
            .dequantize(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let mut blocks = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let mut weight = |leaf: &str, shape: [usize; 2]| {
                ckpt.tensor(&format!("blk.{i}.{leaf}.weight"), &shape)
            };
            let attn_qkv = Linear::stacked(
                &[
                    weight("attn_q", [q_width, h])?,
                    weight("attn_k", [kv_width, h])?,
                    weight("attn_v", [kv_width, h])?,
                ],
                mode,
            )?;
            let attn_output = Linear::new(weight("attn_output", [h, q_width])?, mode)?;
            let ffn_gate_up = Linear::stacked(
                &[
                    weight("ffn_gate", [c.intermediate_size, h])?,
                    weight("ffn_up", [c.intermediate_size, h])?,
                ],
                mode,
            )?;
            let ffn_down = Linear::new(weight("ffn_down", [h, c.intermediate_size])?, mode)?;
            let mut norm = |leaf: &str, width: usize| -> Result<RmsNorm> {
                RmsNorm::new(
                    ckpt.tensor(&format!("blk.{i}.{leaf}.weight"), &[width])?,
                    c.rms_norm_eps,
                )
            };
            let (attn_q_norm, attn_k_norm) = if c.has_qk_norm() {
                (
                    Some(norm("attn_q_norm", c.head_dim)?),
                    Some(norm("attn_k_norm", c.head_dim)?),
                )
            } else {
                (None, None)
            };
            blocks.push(Block {
                attn_norm: norm("attn_norm", h)?,
                ffn_norm: norm("ffn_norm", h)?,
                attn_qkv,
                attn_q_norm,
                attn_k_norm,
                attn_output,
                ffn_gate_up,
                ffn_down,
            });
        }
        let output_norm = RmsNorm::new(ckpt.tensor("output_norm.weight", &[h])?, c.rms_norm_eps)?;
        let rope = Rope::new(&c, max_positions);
        Ok(Self {
            config: c,
            token_embd,
            blocks,
            output_norm,
            output,
            rope,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    /// Runs the batch through every layer, writing its keys/values into `kv`, and returns
    /// logits `[batch.sample_rows().len(), vocab]` for the rows that sample.
    pub fn forward(&self, batch: &ForwardBatch, kv: &mut KvCache) -> Result<Vec<f32>> {
        let c = &self.config;
        let t = batch.num_tokens();
        let h = c.hidden_size;
        // 1. Embed: x [T, hidden]
        let mut x = Vec::with_capacity(t * h);
        for &tok in &batch.token_ids {
            let tok = tok as usize;
            x.extend_from_slice(&self.token_embd[tok * h..(tok + 1) * h]);
        }
        // 2. Decoder blocks, each adding attention then MLP to the residual stream.
        for (layer, block) in self.blocks.iter().enumerate() {
            let attn = self.attention(block, layer, &x, batch, kv)?;
            add_inplace(&mut x, &attn);
            let mlp = self.mlp(block, &x, t)?;
            add_inplace(&mut x, &mlp);
        }
        // 3. Logits only for the rows that sample: [S, hidden] → [S, vocab]
        let rows = batch.sample_rows();
        let mut last = Vec::with_capacity(rows.len() * h);
        for &r in &rows {
            last.extend_from_slice(&x[r * h..(r + 1) * h]);
        }
        self.output_norm.forward_inplace(&mut last);
        self.output.forward(&last, rows.len())
    }

    fn attention(
        &self,
        b: &Block,
        layer: usize,
        x: &[f32],
        batch: &ForwardBatch,
        kv: &mut KvCache,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let t = batch.num_tokens();
        // 1. h = norm(x); q [T, heads*d], k/v [T, kv_heads*d]
        let h = b.attn_norm.forward(x);
        let (q_width, kv_width) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let qkv = b.attn_qkv.forward(&h, t)?;
        let [mut q, mut k, v]: [Vec<f32>; 3] =
            split_columns(&qkv, t, &[q_width, kv_width, kv_width])
                .try_into()
                .expect("three widths give three parts");
        // 2. Qwen3 normalizes each head before rotating it.
        if let (Some(qn), Some(kn)) = (&b.attn_q_norm, &b.attn_k_norm) {
            qn.forward_inplace(&mut q);
            kn.forward_inplace(&mut k);
        }
        // 3. Rotate by position, store k/v in the paged cache (before reading: a chunk
        //    attends to its own earlier tokens).
        self.rope.apply(&mut q, &batch.positions);
        self.rope.apply(&mut k, &batch.positions);
        kv.write(layer, &batch.slots, &k, &v);
        // 4. Attend through block tables, project back: [T, hidden]
        let shape = AttentionShape {
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            block_size: kv.block_size(),
        };
        let attn = paged_attention(&q, kv.layer(layer), batch, shape);
        b.attn_output.forward(&attn, t)
    }

    fn mlp(&self, b: &Block, x: &[f32], t: usize) -> Result<Vec<f32>> {
        // down(silu(gate(h)) * up(h)), h = norm(x)
        let h = b.ffn_norm.forward(x);
        let width = b.ffn_down_in();
        let gate_up = b.ffn_gate_up.forward(&h, t)?;
        let [mut gate, up]: [Vec<f32>; 2] = split_columns(&gate_up, t, &[width, width])
            .try_into()
            .expect("two widths give two parts");
        swiglu_inplace(&mut gate, &up);
        b.ffn_down.forward(&gate, t)
    }
}

impl Block {
    fn ffn_down_in(&self) -> usize {
        self.ffn_gate_up.out_features() / 2
    }
}

trait CloneForTie {
    fn clone_for_tie(&self) -> Result<candle_core::quantized::QTensor>;
}

impl CloneForTie for candle_core::quantized::QTensor {
    /// Tied embeddings: the output layer reuses the embedding's bytes.
    fn clone_for_tie(&self) -> Result<candle_core::quantized::QTensor> {
        let data = self.data()?;
        let storage =
            candle_core::quantized::QStorage::from_data(data, &Device::Cpu, self.dtype())?;
        Ok(candle_core::quantized::QTensor::new(
            storage,
            self.shape().clone(),
        )?)
    }
}
