//! `ModelRunner`: the worker. Owns the model and its KV cache and runs one forward pass
//! per step over the scheduler's flattened batch.

use crate::error::Result;
use crate::forward_batch::ForwardBatch;
use crate::kv_cache::{KvCache, KvCacheDtype};
use crate::models::Llama;

pub struct ModelRunner {
    model: Llama,
    kv_cache: KvCache,
}

/// Logits `[rows, vocab]`, one row per sampling sequence of the batch, in batch order.
pub struct Logits {
    pub data: Vec<f32>,
    pub vocab: usize,
}

impl Logits {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }
}

impl ModelRunner {
    pub fn new(model: Llama, num_blocks: usize, block_size: usize, kv_dtype: KvCacheDtype) -> Self {
        let c = model.config();
        let kv_cache = KvCache::new(
            c.num_layers,
            num_blocks,
            block_size,
            c.num_kv_heads * c.head_dim,
            kv_dtype,
        );
        Self { model, kv_cache }
    }

    pub fn model(&self) -> &Llama {
        &self.model
    }

    pub fn execute(&mut self, batch: &ForwardBatch) -> Result<Logits> {
        let data = self.model.forward(batch, &mut self.kv_cache)?;
        Ok(Logits {
            data,
            vocab: self.model.config().vocab_size,
        })
    }
}
