//! `Sequence`: the engine's state for one request — its tokens, how many of them have
//! their keys/values computed, and the blocks holding them.

use crate::kv::block_manager::BlockHash;
use crate::kv::block_table::BlockTable;
use crate::sample::sampling_params::SamplingParams;
use crate::sample::token_constraint::ConstraintCell;
use crate::sched::draft_acceptance::DraftAcceptance;
use crate::sched::hidden_pool::HiddenPool;
use crate::sched::request::{EmbedRequest, FinishReason, Request, RequestTimings, SeqId};

#[derive(Debug, Clone)]
pub struct Sequence {
    pub id: SeqId,
    /// Prompt followed by generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Leading tokens whose keys/values are in the cache. The gap to `tokens.len()` is
    /// what the scheduler closes: a whole prompt, a chunk of it, or one decode token.
    pub num_computed: usize,
    /// Per KV cache group, the blocks holding its computed (and this step's) positions;
    /// empty while it holds none.
    pub block_tables: Vec<BlockTable>,
    /// Hashes of the full blocks already offered to the prefix cache.
    pub block_hashes: Vec<BlockHash>,
    pub params: SamplingParams,
    pub seed: u64,
    pub priority: i32,
    /// Admission order, for FCFS and for choosing whom to preempt.
    pub arrival_seq: u64,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_prompt_tokens: usize,
    pub num_preemptions: usize,
    /// The next prompt position whose logits (scoring the token after it) are still to be
    /// reported, when the request asked for prompt logprobs. Kept across preemption, so a
    /// recomputed prompt reports nothing twice.
    pub prompt_logits_next: usize,
    pub finish: Option<FinishReason>,
    /// Advanced once per accepted output token; a recompute after preemption replays KV, not
    /// sampling, so it never touches this.
    pub constraint: Option<ConstraintCell>,
    pub timings: RequestTimings,
    /// Tokens proposed to follow `tokens`, to be verified by the next step; never part of
    /// `tokens` until the target model has produced them itself.
    pub drafts: Vec<u32>,
    /// How often this sequence's drafts have been accepted, for sizing its next verify.
    pub acceptance: DraftAcceptance,
    /// An embedding request's pool of final hidden states; `None` for a generate request.
    /// Such a sequence is prefill-only: it never samples and ends when its prompt is done.
    pub pool: Option<HiddenPool>,
}

impl Sequence {
    /// A new waiting sequence; `seed` drives its sampling, `id` also fixes its arrival order.
    pub fn new(id: SeqId, req: Request, seed: u64, arrival: std::time::Instant) -> Self {
        Self {
            id,
            prompt_len: req.prompt.len(),
            tokens: req.prompt,
            num_computed: 0,
            block_tables: Vec::new(),
            block_hashes: Vec::new(),
            params: req.params,
            seed,
            priority: req.priority,
            arrival_seq: id.0,
            cached_prompt_tokens: 0,
            num_preemptions: 0,
            prompt_logits_next: 0,
            finish: None,
            constraint: req.constraint,
            timings: RequestTimings::new(arrival),
            drafts: Vec::new(),
            acceptance: DraftAcceptance::default(),
            pool: None,
        }
    }

    /// A new waiting embedding sequence: its prompt, nothing to generate.
    pub fn embedding(id: SeqId, req: EmbedRequest, arrival: std::time::Instant) -> Self {
        let prompt = Request {
            prompt: req.prompt,
            params: SamplingParams::greedy(0),
            priority: req.priority,
            constraint: None,
        };
        Self {
            pool: Some(HiddenPool::new(req.pooling)),
            ..Self::new(id, prompt, 0, arrival)
        }
    }

    /// Whether no prompt position may come from the prefix cache: cached positions have no
    /// logits to score a prompt with, and no hidden state to add to a mean.
    pub fn needs_every_position(&self) -> bool {
        !self.pending_prompt_logits().is_empty()
            || self
                .pool
                .as_ref()
                .is_some_and(HiddenPool::needs_every_position)
    }

    pub fn output(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    pub fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_len]
    }

    /// Prompt positions whose logits are still wanted: each scores the prompt token after it,
    /// so the last prompt position (which samples) is never among them.
    pub fn pending_prompt_logits(&self) -> std::ops::Range<usize> {
        match self.params.prompt_logprobs {
            Some(_) if self.prompt_logits_next + 1 < self.prompt_len => {
                self.prompt_logits_next..self.prompt_len - 1
            }
            _ => 0..0,
        }
    }

    /// Tokens known but not yet computed.
    pub fn gap(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    /// Its next step computes one generated token: the prompt (and any recompute) is done.
    pub fn is_decoding(&self) -> bool {
        self.gap() == 1 && self.num_computed >= self.prompt_len
    }

    /// Pages it holds, over every group.
    pub fn pages_held(&self) -> usize {
        self.block_tables.iter().map(|t| t.held().len()).sum()
    }
}
