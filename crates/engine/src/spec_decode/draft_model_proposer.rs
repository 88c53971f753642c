//! `DraftModelProposer`: a smaller model with the target's vocabulary, run by the same
//! kernels on its own KV cache, drafts greedily.

use super::proposer::Proposer;
use crate::config::hf_overrides::HfOverrides;
use crate::config::{KvCacheDtype, WeightMode};
use crate::error::{EngineError, Result};
use crate::forward_batch::ForwardBatch;
use crate::kv::block_manager::{BlockId, BlockManager};
use crate::kv::kv_cache::KvCache;
use crate::models::checkpoint;
use crate::models::DecoderModel;
use crate::sample::sampler::argmax;
use crate::sched::request::SeqId;
use std::collections::HashMap;
use std::path::Path;

const BLOCK_SIZE: usize = 16;
/// Prompt tokens the draft model takes per forward pass when it first sees a sequence.
const CHUNK: usize = 512;

pub struct DraftModelProposer {
    model: DecoderModel,
    kv: KvCache,
    blocks: BlockManager,
    seqs: HashMap<SeqId, DraftSeq>,
}

/// What the draft model holds for one sequence: the tokens whose keys/values are in its
/// cache (a prefix of the sequence, then possibly drafts the target rejected), and where.
#[derive(Default)]
struct DraftSeq {
    fed: Vec<u32>,
    table: Vec<BlockId>,
}

/// Where the draft comes from and how much it may hold.
pub struct DraftModelSpec<'a> {
    pub path: &'a Path,
    pub hf_overrides: Option<&'a HfOverrides>,
    pub weight_mode: WeightMode,
    pub max_model_len: usize,
    /// Tokens its KV cache holds over all sequences (the target's pool size is right: the
    /// draft follows the same sequences).
    pub kv_tokens: usize,
    /// The target's vocabulary size, which the draft's must equal.
    pub vocab_size: usize,
}

impl DraftModelProposer {
    pub fn load(spec: &DraftModelSpec) -> Result<Self> {
        let bad = |reason: String| {
            EngineError::InvalidConfig(crate::config::ConfigError::new(
                "speculative_config",
                spec.path.display(),
                reason,
            ))
        };
        let mut ckpt = checkpoint::open(spec.path)?;
        if let Some(overrides) = spec.hf_overrides {
            overrides
                .apply(ckpt.config_mut())
                .map_err(|e| bad(format!("hf_overrides: {e}")))?;
        }
        let vocab = ckpt.config().vocab_size;
        if vocab != spec.vocab_size {
            return Err(bad(format!(
                "the draft model's vocabulary has {vocab} tokens, the target's {}: a draft must share the target's tokenizer",
                spec.vocab_size
            )));
        }
        let model = DecoderModel::load(ckpt.as_mut(), spec.weight_mode, spec.max_model_len)?;
        let c = model.config();
        let num_blocks = spec.kv_tokens.div_ceil(BLOCK_SIZE).max(1);
        let kv = KvCache::new(
            c.num_layers,
            num_blocks,
            BLOCK_SIZE,
            c.kv_heads(),
            KvCacheDtype::Auto.resolve(),
        );
        tracing::info!(
            "draft model: {} ({} layers), KV cache {num_blocks} blocks of {BLOCK_SIZE}",
            spec.path.display(),
            c.num_layers
        );
        Ok(Self {
            model,
            kv,
            blocks: BlockManager::new(num_blocks, BLOCK_SIZE, false),
            seqs: HashMap::new(),
        })
    }

    /// Runs `tokens` from position `start` through the draft model; the last row's argmax,
    /// or `None` when its cache has no room.
    fn feed(&mut self, id: SeqId, tokens: &[u32], start: usize) -> Option<u32> {
        let seq = self.seqs.get_mut(&id)?;
        let end = start + tokens.len();
        let need = end.div_ceil(BLOCK_SIZE).saturating_sub(seq.table.len());
        seq.table.extend(self.blocks.allocate(need)?);
        let mut last = None;
        for (i, piece) in tokens.chunks(CHUNK).enumerate() {
            let from = start + i * CHUNK;
            let sample = from + piece.len() == end;
            let mut batch = ForwardBatch::default();
            batch.push_seq(piece, from, &seq.table, BLOCK_SIZE, sample);
            let logits = self.model.forward(&batch, &mut self.kv).ok()?;
            if sample {
                last = Some(argmax(&logits));
            }
        }
        seq.fed.truncate(start);
        seq.fed.extend_from_slice(tokens);
        last
    }
}

impl Proposer for DraftModelProposer {
    fn propose(&mut self, id: SeqId, tokens: &[u32], _prompt_len: usize, max: usize) -> Vec<u32> {
        if tokens.is_empty() || max == 0 {
            return Vec::new();
        }
        let seq = self.seqs.entry(id).or_default();
        // Keys of the longest prefix it was fed that the sequence still has are reusable;
        // the last token is always fed again, for the logits that draft the next.
        let same = seq
            .fed
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1);
        let mut drafts = Vec::with_capacity(max);
        let mut next = self.feed(id, &tokens[same..], same);
        while let Some(token) = next {
            drafts.push(token);
            if drafts.len() == max {
                break;
            }
            next = self.feed(id, &[token], tokens.len() + drafts.len() - 1);
        }
        drafts
    }

    fn finished(&mut self, id: SeqId, _tokens: &[u32], _prompt_len: usize) {
        if let Some(seq) = self.seqs.remove(&id) {
            for &block in seq.table.iter().rev() {
                self.blocks.release(block);
            }
        }
    }
}
