//! Causal attention over the paged KV cache, our own CPU kernel.
//!
//! Each query token attends to positions `0..=pos` of its own sequence, reading keys and
//! values through the sequence's block table. Work is split into (token, KV head) tasks:
//! the query heads sharing a KV head (GQA) are processed together so every key and value
//! row is loaded once per group. Every task is independent of the rest of the batch, so a
//! token's output does not depend on what else is batched with it.

use crate::forward_batch::ForwardBatch;
use crate::kv_cache::KvLayer;
use rayon::prelude::*;

#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

/// `q`: `[T, num_heads * head_dim]` (already rotated) → `[T, num_heads * head_dim]`.
pub fn paged_attention(
    q: &[f32],
    kv: &KvLayer,
    batch: &ForwardBatch,
    shape: AttentionShape,
) -> Vec<f32> {
    let group = shape.num_heads / shape.num_kv_heads;
    let chunk = group * shape.head_dim;
    let mut out = vec![0.0f32; q.len()];
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(task, out)| {
            let (token, kv_head) = (task / shape.num_kv_heads, task % shape.num_kv_heads);
            let q_start = token * shape.num_heads * shape.head_dim + kv_head * chunk;
            let task = Task {
                q: &q[q_start..q_start + chunk],
                kv,
                block_table: &batch.seqs[batch.seq_index[token]].block_table,
                context_len: batch.positions[token] + 1,
                kv_head,
                shape,
            };
            task.run(out);
        });
    out
}

struct Task<'a> {
    /// `[group, head_dim]` query heads sharing `kv_head`.
    q: &'a [f32],
    kv: &'a KvLayer,
    block_table: &'a [crate::block_manager::BlockId],
    context_len: usize,
    kv_head: usize,
    shape: AttentionShape,
}

impl Task<'_> {
    fn run(&self, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { self.run_avx2(out) };
        }
        self.run_portable(out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, out: &mut [f32]) {
        self.run_portable(out)
    }

    #[inline(always)]
    fn run_portable(&self, out: &mut [f32]) {
        let AttentionShape {
            head_dim,
            block_size,
            num_kv_heads,
            ..
        } = self.shape;
        let group = self.q.len() / head_dim;
        let width = num_kv_heads * head_dim;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let n = self.context_len;
        // 1. scores[g, j] = q_g · k_j / sqrt(d)
        let mut scores = vec![0.0f32; group * n];
        for j in 0..n {
            let k = self.row(&self.kv.keys, j, width, block_size);
            for g in 0..group {
                scores[g * n + j] = dot(&self.q[g * head_dim..(g + 1) * head_dim], k) * scale;
            }
        }
        // 2. softmax over j, per head
        for row in scores.chunks_exact_mut(n) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for s in row.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|s| *s *= inv);
        }
        // 3. out_g = Σ_j p[g, j] · v_j
        out.fill(0.0);
        for j in 0..n {
            let v = self.row(&self.kv.values, j, width, block_size);
            for g in 0..group {
                axpy(
                    &mut out[g * head_dim..(g + 1) * head_dim],
                    scores[g * n + j],
                    v,
                );
            }
        }
    }

    /// This task's KV head at position `pos`, found through the block table.
    #[inline(always)]
    fn row<'b>(&self, slab: &'b [f32], pos: usize, width: usize, block_size: usize) -> &'b [f32] {
        let slot = self.block_table[pos / block_size].index() * block_size + pos % block_size;
        let start = slot * width + self.kv_head * self.shape.head_dim;
        &slab[start..start + self.shape.head_dim]
    }
}

/// Dot product with 8 independent accumulators so the compiler can use SIMD lanes.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn axpy(out: &mut [f32], w: f32, v: &[f32]) {
    for (o, x) in out.iter_mut().zip(v) {
        *o += w * x;
    }
}
