//! `SchedulerOutput`: what one step runs, as the scheduler hands it to the engine: each
//! sequence's chunk, the batch the model sees, and what `update` reports back per sequence.

use super::request::SeqId;
use super::sequence::Sequence;
use crate::forward_batch::ForwardBatch;
use crate::kv::block_id::BlockId;
use crate::sample::sampled_token::SampledToken;
use std::ops::Range;
use std::time::Instant;

/// One sequence's share of a step: tokens `start..start + len` are computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq_id: SeqId,
    pub start: usize,
    pub len: usize,
    /// The chunk reaches the end of the known tokens, so its last row yields a new token.
    pub sample: bool,
    /// Draft tokens verified after the sequence's last token (a decode only): the chunk's
    /// `len` is `1 + drafts`, and each of its rows samples.
    pub drafts: usize,
    /// Positions of this chunk whose logits score the prompt (prompt logprobs); set when the
    /// batch is built.
    pub prompt_logits: Range<usize>,
}

#[derive(Debug, Default)]
pub struct SchedulerOutput {
    pub chunks: Vec<ScheduledChunk>,
    pub preempted: Vec<SeqId>,
    pub batch: ForwardBatch,
    /// The step cost model's forecast for this step, once it has seen enough steps.
    pub predicted_seconds: Option<f64>,
    /// Prefill tokens the ITL target allowed this step (`None` without a target).
    pub prefill_allowance: Option<usize>,
    /// Prompt tokens this step computes (every chunk but the one-token decodes).
    pub prefill_tokens: usize,
}

/// One page's bytes read back from the disk tier, and the page they go to (registered as
/// cached already: the engine copies them in before the next `schedule`).
#[derive(Debug)]
pub struct PageLoad {
    pub block: BlockId,
    pub page: Vec<u8>,
}

impl SchedulerOutput {
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    pub fn num_tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.len).sum()
    }
}

/// What happened to a sequence in `update`.
#[derive(Debug)]
pub struct SeqUpdate {
    pub seq_id: SeqId,
    /// The tokens this step added to the sequence: one, or with speculation the accepted
    /// drafts and the token after them.
    pub tokens: Vec<SampledToken>,
    pub time: Instant,
    /// Set when these tokens ended the sequence; the sequence itself is returned with it.
    pub finished: Option<Sequence>,
}
