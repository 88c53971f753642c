//! `DecoderModel`: the one decoder-only transformer every supported family runs as, its
//! differences read from `ModelConfig`: the Llama family (Llama 2/3, SmolLM2, Mistral-shaped),
//! Qwen2, which is the
//! same network plus biases on the query/key/value projections, and Qwen3 dense, which adds
//! an RMSNorm on each query and key head instead, and Qwen3-MoE, whose sparse layers route
//! each token through a few experts ([`SparseMoeBlock`]) in place of the MLP, and Gemma 3,
//! whose embeddings are scaled by √hidden, whose attention and MLP outputs are normalized
//! before they join the residual, whose MLP is GeGLU, and whose sliding layers attend to a
//! window of recent positions with their own RoPE base.
//!
//! Tensor names follow GGUF (`blk.N.attn_q.weight`); other formats are mapped at load.

use super::forward_scratch::{ForwardScratch, ScratchShape};
use super::layers::{Embedding, GateUp, GatedActivation, Linear, RmsNorm, Rope};
use super::moe_router::ExpertChoice;
use super::sparse_moe_block::SparseMoeBlock;
use crate::attention::{paged_attention_into, AttentionShape};
use crate::config::model_config::{Architecture, ModelConfig};
use crate::config::WeightMode;
use crate::error::{EngineError, Result};
use crate::forward_batch::ForwardBatch;
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kv::kv_cache::KvCache;
use crate::models::checkpoint::Checkpoint;
use candle_core::Device;
use std::sync::Mutex;

pub struct DecoderModel {
    config: ModelConfig,
    token_embd: Embedding,
    blocks: Vec<Block>,
    output_norm: RmsNorm,
    output: Linear,
    /// Every layer's rotation, or the global layers' where some slide.
    rope: Rope,
    /// The sliding layers' rotation (their own base, unscaled).
    local_rope: Option<Rope>,
    /// Gemma multiplies the embeddings by √hidden.
    embed_scale: Option<f32>,
    /// The forward pass's activations, reused step after step.
    scratch: Mutex<ForwardScratch>,
}

struct Block {
    attn_norm: RmsNorm,
    /// Q, K and V projections stacked: `[heads*d + 2*kv_heads*d, hidden]`.
    attn_qkv: Linear,
    /// Qwen2's biases for the stacked projection, `[heads*d + 2*kv_heads*d]`.
    attn_qkv_bias: Option<Vec<f32>>,
    attn_q_norm: Option<RmsNorm>,
    attn_k_norm: Option<RmsNorm>,
    attn_output: Linear,
    /// Gemma's norm of the attention output before the residual add.
    post_attn_norm: Option<RmsNorm>,
    ffn_norm: RmsNorm,
    ffn: FeedForward,
    /// Gemma's norm of the MLP output before the residual add.
    post_ffn_norm: Option<RmsNorm>,
}

/// What a layer adds to the residual after attention.
enum FeedForward {
    Dense {
        /// Gate and up projections stacked: `[2*intermediate, hidden]`.
        gate_up: GateUp,
        down: Linear,
    },
    Sparse(SparseMoeBlock),
}

impl DecoderModel {
    pub fn load(ckpt: &mut dyn Checkpoint, mode: WeightMode, max_positions: usize) -> Result<Self> {
        // Refuse a bad TOKENMILL_CPU_KERNEL before any work; the path is fixed (and logged)
        // on first use.
        CpuKernel::from_env().map_err(EngineError::BadEnvironment)?;
        let c = ckpt.config().clone();
        let (h, q_width, kv_width) = (
            c.hidden_size,
            c.num_heads * c.head_dim,
            c.num_kv_heads * c.head_dim,
        );
        let embd = ckpt.tensor("token_embd.weight", &[c.vocab_size, h])?;
        let token_embd = Embedding::new(&embd)?;
        let output = if ckpt.has_tensor("output.weight") {
            Linear::new(ckpt.tensor("output.weight", &[c.vocab_size, h])?, mode)?
        } else {
            match (mode, token_embd.quantized()) {
                (WeightMode::Quantized, Some(q)) => Linear::from_quant(q),
                _ => Linear::new(embd.clone_for_tie()?, mode)?,
            }
        };
        // Grown as layers load, not reserved from the metadata's count: a file claiming
        // millions of layers fails at its first missing tensor, not at allocation.
        let mut blocks = Vec::new();
        for i in 0..c.num_layers {
            let has_bias =
                c.requires_qkv_bias() || ckpt.has_tensor(&format!("blk.{i}.attn_q.bias"));
            let attn_qkv_bias = if has_bias {
                let mut stacked = Vec::new();
                for (leaf, width) in [
                    ("attn_q", q_width),
                    ("attn_k", kv_width),
                    ("attn_v", kv_width),
                ] {
                    let bias = ckpt.tensor(&format!("blk.{i}.{leaf}.bias"), &[width])?;
                    stacked.extend(bias.dequantize(&Device::Cpu)?.to_vec1::<f32>()?);
                }
                Some(stacked)
            } else {
                None
            };
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
            let activation = match c.architecture {
                Architecture::Gemma3 => GatedActivation::GeluTanh,
                _ => GatedActivation::Silu,
            };
            let ffn = if c.is_sparse_layer(i) {
                FeedForward::Sparse(SparseMoeBlock::load(ckpt, i, &c, mode)?)
            } else {
                FeedForward::Dense {
                    gate_up: GateUp::with_activation(
                        weight("ffn_gate", [c.intermediate_size, h])?,
                        weight("ffn_up", [c.intermediate_size, h])?,
                        mode,
                        activation,
                    )?,
                    down: Linear::new(weight("ffn_down", [h, c.intermediate_size])?, mode)?,
                }
            };
            let mut norm = |leaf: &str, width: usize| -> Result<RmsNorm> {
                RmsNorm::new(
                    ckpt.tensor(&format!("blk.{i}.{leaf}.weight"), &[width])?,
                    c.rms_norm_eps,
                )
            };
            let (attn_q_norm, attn_k_norm) = if c.has_qk_norm() {
                let mut q_norm = norm("attn_q_norm", c.head_dim)?;
                // Scores scaled by `query_pre_attn_scalar^-0.5` rather than the kernel's
                // `head_dim^-0.5`: the queries carry the ratio, through their norm's weights
                // (RoPE is linear), as llama.cpp's converter stores a Gemma 3 file.
                if let Some(scalar) = c.query_pre_attn_scalar {
                    q_norm.scale_weights((c.head_dim as f64 / scalar).sqrt() as f32);
                }
                (Some(q_norm), Some(norm("attn_k_norm", c.head_dim)?))
            } else {
                (None, None)
            };
            let (post_attn_norm, post_ffn_norm) = match c.architecture {
                Architecture::Gemma3 => (
                    Some(norm("post_attention_norm", h)?),
                    Some(norm("post_ffw_norm", h)?),
                ),
                _ => (None, None),
            };
            blocks.push(Block {
                attn_norm: norm("attn_norm", h)?,
                ffn_norm: norm("ffn_norm", h)?,
                post_attn_norm,
                post_ffn_norm,
                attn_qkv,
                attn_qkv_bias,
                attn_q_norm,
                attn_k_norm,
                attn_output,
                ffn,
            });
        }
        let output_norm = RmsNorm::new(ckpt.tensor("output_norm.weight", &[h])?, c.rms_norm_eps)?;
        let rope = Rope::new(&c, max_positions);
        let local_rope = c
            .local_attention
            .as_ref()
            .map(|l| Rope::with_base(&c, l.rope_theta, None, max_positions));
        // In f32 first, as transformers and llama.cpp both take it.
        let embed_scale = (c.architecture == Architecture::Gemma3).then(|| (h as f32).sqrt());
        Ok(Self {
            config: c,
            token_embd,
            blocks,
            output_norm,
            output,
            rope,
            local_rope,
            embed_scale,
            scratch: Mutex::new(ForwardScratch::default()),
        })
    }

    /// Weight bytes one decode step of one sequence reads: every projection of every layer
    /// and the output layer (the embedding lookup reads one row). `None` for a model with
    /// sparse layers, whose bytes depend on the experts each step routes to.
    pub fn decode_weight_bytes(&self) -> Option<usize> {
        let mut bytes = self.output.weight_bytes();
        for b in &self.blocks {
            bytes += b.attn_qkv.weight_bytes() + b.attn_output.weight_bytes();
            match &b.ffn {
                FeedForward::Dense { gate_up, down } => {
                    bytes += gate_up.weight_bytes() + down.weight_bytes()
                }
                FeedForward::Sparse(_) => return None,
            }
        }
        Some(bytes)
    }

    /// Integer operations (a multiply and an add each) of one prompt token's matmuls: every
    /// layer's Q/K/V, and o_proj and the MLP in every layer but the last, which runs them only
    /// for rows that sample or score (the output layer too). The numerator of the prefill
    /// roofline. `None` for a model with sparse layers.
    pub fn prompt_token_ops(&self) -> Option<usize> {
        let last = self.blocks.len().checked_sub(1)?;
        let mut multiply_adds = 0;
        for (i, b) in self.blocks.iter().enumerate() {
            multiply_adds += b.attn_qkv.multiply_adds();
            let FeedForward::Dense { gate_up, down } = &b.ffn else {
                return None;
            };
            if i != last {
                multiply_adds +=
                    b.attn_output.multiply_adds() + gate_up.multiply_adds() + down.multiply_adds();
            }
        }
        Some(2 * multiply_adds)
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    /// Runs the batch through every layer, writing its keys/values into `kv`, and returns
    /// logits `[batch.logit_rows().len(), vocab]` for the rows that sample (and any rows that
    /// score a prompt).
    pub fn forward(&self, batch: &ForwardBatch, kv: &mut KvCache) -> Result<Vec<f32>> {
        let mut logits = Vec::new();
        self.forward_into(batch, kv, &mut logits)?;
        Ok(logits)
    }

    /// [`forward`](Self::forward) into a caller's buffer, reusing this model's scratch: once
    /// the buffers have grown to the largest batch, a step allocates nothing here.
    pub fn forward_into(
        &self,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        // Empty, so it allocates nothing unless the batch asks for hidden states.
        let mut hidden = Vec::new();
        self.forward_outputs_into(batch, kv, logits, &mut hidden)
    }

    /// [`forward_into`](Self::forward_into), also writing into `hidden` the final hidden
    /// states (`[batch.hidden_rows().len(), hidden]`, after the output norm) of the rows an
    /// embedding request asked for ([`ForwardBatch::want_hidden`]). Those rows get no logits.
    pub fn forward_outputs_into(
        &self,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        logits: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) -> Result<()> {
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut *guard;
        let (t, h) = (batch.num_tokens(), self.config.hidden_size);
        batch.logit_rows_into(&mut s.sample_rows);
        batch.hidden_rows_into(&mut s.hidden_rows);
        let outputs = s.sample_rows.len() + s.hidden_rows.len();
        s.resize(self.scratch_shape(), t, outputs);
        // 1. Embed: x [T, hidden]
        self.token_embd.lookup_into(&batch.token_ids, &mut s.x);
        if let Some(scale) = self.embed_scale {
            s.x[..t * h].iter_mut().for_each(|v| *v *= scale);
        }
        // 2. Decoder blocks, each adding attention then MLP to the residual stream. The
        //    last one goes on with only the rows whose logits are wanted: every row's keys
        //    and values are stored by then, and nothing reads the other rows' outputs.
        let (q_width, last) = (
            self.config.num_heads * self.config.head_dim,
            self.blocks.len() - 1,
        );
        let mut rows = t;
        for (layer, block) in self.blocks.iter().enumerate() {
            // attn [T, heads*d]; x[..rows] += o_proj(attn[..rows]); x[..rows] += mlp(...)
            self.attend(block, layer, batch, kv, s)?;
            // (A sparse last layer keeps every row: its routing is reported for each.)
            if layer == last && matches!(block.ffn, FeedForward::Dense { .. }) {
                rows = keep_output_rows(s, t, h, q_width);
            }
            let out = OutputProjection {
                linear: &block.attn_output,
                post_norm: block.post_attn_norm.as_ref(),
            };
            out.add_into(
                &s.attn[..rows * q_width],
                rows,
                (&mut s.x[..rows * h], &mut s.normed[..rows * h]),
                &mut s.quantized,
            )?;
            self.feed_forward(block, layer, rows, s)?;
        }
        // 3. The final norm of the rows that sample or score a prompt, then of the rows whose
        //    hidden states are wanted: [S + H, hidden]. Logits only for the first S.
        let rows_out = s.sample_rows.iter().chain(&s.hidden_rows);
        for (dst, &r) in s.last.chunks_exact_mut(h).zip(rows_out) {
            dst.copy_from_slice(&s.x[r * h..(r + 1) * h]);
        }
        self.output_norm.forward_inplace(&mut s.last);
        let sampled = s.sample_rows.len();
        let (last, states) = s.last.split_at(sampled * h);
        hidden.clear();
        hidden.extend_from_slice(states);
        logits.resize(sampled * self.config.vocab_size, 0.0);
        self.output
            .forward_into(last, sampled, logits, &mut s.quantized)
    }

    /// Grows the scratch to batches of `tokens` tokens, `samples` of them sampling, so even
    /// the first full step allocates nothing.
    pub fn reserve(&self, tokens: usize, samples: usize) {
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        s.reserve(self.scratch_shape(), tokens, samples);
    }

    /// Per layer, the experts each row of the last forward pass was routed to: `[T, top_k]`
    /// in rank order (descending weight), empty for dense layers and dense models. Tests
    /// compare it with the reference's routing.
    pub fn last_routing(&self) -> Vec<Vec<ExpertChoice>> {
        let s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        s.routing.clone()
    }

    /// How many distinct experts the last forward pass ran per MoE layer, averaged over the
    /// MoE layers; `None` for a dense model.
    pub fn last_active_experts(&self) -> Option<f64> {
        let s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (mut sum, mut layers) = (0, 0);
        for (block, &active) in self.blocks.iter().zip(&s.active_experts) {
            if let FeedForward::Sparse(_) = block.ffn {
                sum += active;
                layers += 1;
            }
        }
        (layers > 0).then(|| sum as f64 / layers as f64)
    }

    fn scratch_shape(&self) -> ScratchShape {
        let c = &self.config;
        let moe = self.blocks.iter().find_map(|b| match &b.ffn {
            FeedForward::Sparse(m) => Some(m.shape()),
            FeedForward::Dense { .. } => None,
        });
        let any_dense = self
            .blocks
            .iter()
            .any(|b| matches!(b.ffn, FeedForward::Dense { .. }));
        let any_stacked = self.blocks.iter().any(|b| match &b.ffn {
            FeedForward::Dense { gate_up, .. } => !gate_up.is_paired(),
            FeedForward::Sparse(_) => false,
        });
        ScratchShape {
            hidden: c.hidden_size,
            q_width: c.num_heads * c.head_dim,
            kv_width: c.num_kv_heads * c.head_dim,
            // A model whose every layer is sparse needs no dense MLP activations.
            intermediate: if any_dense { c.intermediate_size } else { 0 },
            gate_up: if any_stacked { c.intermediate_size } else { 0 },
            layers: self.blocks.len(),
            moe,
        }
    }

    /// `attn = attention(rope(qkv(norm(x)) + bias))`, storing this layer's keys and values;
    /// the caller adds `o_proj(attn)` to the residual.
    fn attend(
        &self,
        b: &Block,
        layer: usize,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) -> Result<()> {
        let c = &self.config;
        let t = batch.num_tokens();
        // 1. q [T, heads*d], k/v [T, kv_heads*d] = qkv(norm(x)) straight from one matmul,
        //    the norm inside its activation quantization
        b.attn_qkv.forward_normed_split_into(
            &b.attn_norm,
            &s.x,
            t,
            &mut [&mut s.q[..], &mut s.k[..], &mut s.v[..]],
            (&mut s.normed, &mut s.quantized),
        )?;
        // 2. Qwen2's biases belong to the projection, so they come before anything else
        //    touches q/k/v; Qwen3 instead normalizes each head before rotating it (step 3).
        if let Some(bias) = &b.attn_qkv_bias {
            let (bq, rest) = bias.split_at(c.num_heads * c.head_dim);
            let (bk, bv) = rest.split_at(c.num_kv_heads * c.head_dim);
            add_bias(&mut s.q, bq);
            add_bias(&mut s.k, bk);
            add_bias(&mut s.v, bv);
        }
        // 3. (Normalize each head, then) rotate by position, in one pass; store k/v in the
        //    paged cache (before reading: a chunk attends to its own earlier tokens).
        let norms = b.attn_q_norm.as_ref().zip(b.attn_k_norm.as_ref());
        let window = c.window_of(layer);
        let rope = match (window, &self.local_rope) {
            (Some(_), Some(local)) => local,
            _ => &self.rope,
        };
        rope.apply(&mut s.q, &batch.positions, norms.map(|(q, _)| q));
        rope.apply(&mut s.k, &batch.positions, norms.map(|(_, k)| k));
        // Each layer reads and writes through its KV cache group's tables.
        let kv_group = kv.groups().group_of(layer);
        let slots = batch.slots.get(kv_group).map_or(&[][..], Vec::as_slice);
        kv.write(layer, slots, &s.k, &s.v);
        // 4. Attend through block tables; x += o_proj(attn): [T, hidden]
        let shape = AttentionShape {
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            block_size: kv.block_size(),
            window,
            kv_group,
        };
        paged_attention_into(&s.q, kv.layer(layer), batch, shape, &mut s.attn);
        Ok(())
    }

    /// `x += down(silu(gate(h)) · up(h))`, `h = norm(x)`, over the first `t` rows, or on a
    /// sparse layer the same through each token's experts, weighted by the router.
    fn feed_forward(
        &self,
        b: &Block,
        layer: usize,
        t: usize,
        s: &mut ForwardScratch,
    ) -> Result<()> {
        match &b.ffn {
            FeedForward::Dense { gate_up, down } => {
                // The buffers hold every row of the step; the last layer uses a prefix.
                let hw = self.config.hidden_size;
                let full = (s.x.len() / hw).max(1);
                let (gw, iw) = (s.gate.len() / full, s.act.len() / full);
                gate_up.forward_normed_into(
                    &b.ffn_norm,
                    &s.x[..t * hw],
                    t,
                    [&mut s.gate[..t * gw], &mut s.up[..t * gw]],
                    &mut s.act[..t * iw],
                    (&mut s.normed[..t * hw], &mut s.quantized),
                )?;
                let out = OutputProjection {
                    linear: down,
                    post_norm: b.post_ffn_norm.as_ref(),
                };
                out.add_into(
                    &s.act[..t * iw],
                    t,
                    (&mut s.x[..t * hw], &mut s.normed[..t * hw]),
                    &mut s.quantized,
                )
            }
            FeedForward::Sparse(moe) => {
                b.ffn_norm.forward_into(&s.x, &mut s.normed);
                s.active_experts[layer] = moe.forward_add_into(
                    &s.normed,
                    &mut s.x,
                    &mut s.routing[layer],
                    &mut s.moe,
                    &mut s.quantized,
                )?;
                Ok(())
            }
        }
    }
}

/// Moves the rows the last layer must finish, those whose logits are wanted
/// (`s.sample_rows`) and those whose hidden states are (`s.hidden_rows`), each list ascending
/// and the two disjoint, to the front of the residual `x` (`[t, hidden]`) and the attention
/// output `attn` (`[t, attn_width]`) in row order, renumbers both lists to the rows' new
/// places, and returns how many rows the last layer goes on with: that count, or all `t`
/// (nothing moved) when every row is wanted or the lists are not so ordered.
fn keep_output_rows(s: &mut ForwardScratch, t: usize, hidden: usize, attn_width: usize) -> usize {
    let (logit_rows, hidden_rows) = (s.sample_rows.len(), s.hidden_rows.len());
    let n = logit_rows + hidden_rows;
    let ascending = |rows: &[usize]| rows.windows(2).all(|w| w[0] < w[1]);
    let disjoint = || {
        let (mut a, mut b) = (0, 0);
        while a < logit_rows && b < hidden_rows {
            match s.sample_rows[a].cmp(&s.hidden_rows[b]) {
                std::cmp::Ordering::Less => a += 1,
                std::cmp::Ordering::Greater => b += 1,
                std::cmp::Ordering::Equal => return false,
            }
        }
        true
    };
    if n >= t || !ascending(&s.sample_rows) || !ascending(&s.hidden_rows) || !disjoint() {
        return t;
    }
    // Merged in ascending order, row `r` moves to `i ≤ r` before any later row overwrites it.
    let (mut a, mut b) = (0, 0);
    for i in 0..n {
        let from_logits =
            b == hidden_rows || (a < logit_rows && s.sample_rows[a] < s.hidden_rows[b]);
        let slot = if from_logits {
            a += 1;
            &mut s.sample_rows[a - 1]
        } else {
            b += 1;
            &mut s.hidden_rows[b - 1]
        };
        let r = std::mem::replace(slot, i);
        if i != r {
            s.x.copy_within(r * hidden..(r + 1) * hidden, i * hidden);
            s.attn
                .copy_within(r * attn_width..(r + 1) * attn_width, i * attn_width);
        }
    }
    n
}

/// A sublayer's output projection and, for Gemma, the norm its output takes before it
/// joins the residual.
struct OutputProjection<'a> {
    linear: &'a Linear,
    post_norm: Option<&'a RmsNorm>,
}

impl OutputProjection<'_> {
    /// `x += linear(input)` over `rows` rows, or with a post-norm `x += norm(linear(input))`
    /// through `tmp` (`x`'s size); each row on its own, so batching changes no bits.
    fn add_into(
        &self,
        input: &[f32],
        rows: usize,
        (x, tmp): (&mut [f32], &mut [f32]),
        act: &mut crate::kernels::quant::QuantizedActivations,
    ) -> Result<()> {
        let Some(norm) = self.post_norm else {
            return self.linear.forward_add_into(input, rows, x, act);
        };
        self.linear.forward_into(input, rows, tmp, act)?;
        norm.forward_inplace(tmp);
        x.iter_mut().zip(&*tmp).for_each(|(v, o)| *v += o);
        Ok(())
    }
}

/// `x[r] += bias` for every `bias.len()`-wide row of `x`.
fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
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
