//! `ModelRunner`: the worker. Owns the model and its KV cache and runs one forward pass
//! per step over the scheduler's flattened batch.

use crate::config::KvCacheDtype;
use crate::error::Result;
use crate::forward_batch::ForwardBatch;
use crate::kv::block_id::BlockId;
use crate::kv::kv_cache::{KvCache, KvShape};
use crate::models::DecoderModel;

pub struct ModelRunner {
    model: DecoderModel,
    kv_cache: KvCache,
    /// The last step's logits; the buffer is reused step after step.
    logits: Logits,
    /// The last step's final hidden states of the rows embedding requests asked for
    /// (`[H, hidden]`, in batch order); empty when none did.
    hidden: Vec<f32>,
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
    /// A runner whose KV cache has `num_blocks` pages shared by the model's KV cache groups.
    pub fn new(
        model: DecoderModel,
        num_blocks: usize,
        block_size: usize,
        kv_dtype: KvCacheDtype,
    ) -> Self {
        let c = model.config();
        let shape = KvShape {
            num_blocks,
            block_size,
            heads: c.kv_heads(),
            dtype: kv_dtype,
        };
        let kv_cache = KvCache::with_groups(c.kv_cache_groups(), shape);
        let logits = Logits {
            data: Vec::new(),
            vocab: model.config().vocab_size,
        };
        Self {
            model,
            kv_cache,
            logits,
            hidden: Vec::new(),
        }
    }

    pub fn model(&self) -> &DecoderModel {
        &self.model
    }

    /// Sizes every buffer for steps of up to `tokens` tokens and `seqs` sequences, so
    /// steady-state steps allocate nothing in the forward pass.
    pub fn reserve(&mut self, tokens: usize, seqs: usize) {
        self.model.reserve(tokens, seqs);
        self.logits.data.reserve(seqs * self.logits.vocab);
    }

    /// Runs one forward pass; its logits stay readable through [`logits`](Self::logits),
    /// and the hidden states embedding requests asked for through [`hidden`](Self::hidden).
    pub fn execute(&mut self, batch: &ForwardBatch) -> Result<&Logits> {
        let (model, kv, logits) = (&self.model, &mut self.kv_cache, &mut self.logits.data);
        // The pass's parallel loops run on the compute pool, whose helpers spin between
        // them (`compute_pool`), so this thread calls it directly.
        model.forward_outputs_into(batch, kv, logits, &mut self.hidden)?;
        Ok(&self.logits)
    }

    /// The final hidden states of the last [`execute`](Self::execute)'s wanted rows
    /// ([`ForwardBatch::hidden_rows_into`]), `hidden_size` floats each.
    pub fn hidden(&self) -> &[f32] {
        &self.hidden
    }

    /// Backs the next slice of the KV pool's pages ([`KvCache::fault_in_next`]); `false`
    /// once all of it is backed.
    pub fn fault_in_kv(&mut self) -> bool {
        self.kv_cache.fault_in_next()
    }

    /// The KV cache's element type.
    pub fn kv_dtype(&self) -> KvCacheDtype {
        self.kv_cache.dtype()
    }

    /// Bytes of one KV page over every layer ([`KvCache::page_bytes`]).
    pub fn kv_page_bytes(&self) -> usize {
        self.kv_cache.page_bytes()
    }

    /// Appends page `block`'s bytes to `dst` ([`KvCache::copy_page_out`]).
    pub fn copy_page_out(&self, block: BlockId, dst: &mut Vec<u8>) {
        self.kv_cache.copy_page_out(block.index(), dst);
    }

    /// Fills page `block` from `src`; `false` when `src` is not one page.
    pub fn copy_page_in(&mut self, block: BlockId, src: &[u8]) -> bool {
        self.kv_cache.copy_page_in(block.index(), src)
    }

    /// The logits of the last [`execute`](Self::execute).
    pub fn logits(&self) -> &Logits {
        &self.logits
    }
}
