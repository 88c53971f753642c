//! `RejectionSampler`: one step's logit rows to tokens (vLLM's name for the sampler that
//! verifies drafts): each sampling chunk's rows are sampled as one-token steps would sample
//! them, its drafts accepted while they match, and prompt rows scored for prompt logprobs.

use crate::kernels::compute_pool::{ComputePool, Shards};
use crate::sample::sampled_token::SampledToken;
use crate::sample::sampler::{Sampler, SamplingContext};
use crate::sample::sampling_params::SamplingParams;
use crate::sample::token_constraint::{ConstraintCell, ConstraintError};
use rayon::prelude::*;
use std::ops::Range;

/// One sampling chunk of a step as its sequence stands: its rows are its last known token's
/// and one per draft after it.
pub struct SamplingRows<'a> {
    /// Prompt followed by output.
    pub tokens: &'a [u32],
    pub prompt_len: usize,
    pub params: &'a SamplingParams,
    pub seed: u64,
    /// The drafts this chunk verifies, one row each after the first.
    pub drafts: &'a [u32],
    pub constraint: Option<&'a ConstraintCell>,
    /// The chunk's first logit row.
    pub first_row: usize,
}

/// The prompt positions of one chunk whose next token is scored (prompt logprobs).
pub struct ScoringRows<'a> {
    /// Prompt followed by output: position `p` is scored with `tokens[p + 1]`.
    pub tokens: &'a [u32],
    /// Alternatives reported per position.
    pub top_k: usize,
    pub positions: Range<usize>,
    /// The logit row of `positions.start`; the others follow it.
    pub first_row: usize,
}

/// A step's logits `[rows, vocab]` and the model's end-of-sequence tokens, which a request
/// bans until its `min_tokens` are out.
pub struct RejectionSampler<'a> {
    logits: &'a [f32],
    vocab: usize,
    eos_token_ids: &'a [u32],
}

impl<'a> RejectionSampler<'a> {
    pub fn new(logits: &'a [f32], vocab: usize, eos_token_ids: &'a [u32]) -> Self {
        Self {
            logits,
            vocab,
            eos_token_ids,
        }
    }

    fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.vocab..(i + 1) * self.vocab]
    }

    /// The tokens each chunk yields, in `chunks` order; a chunk whose constraint failed on
    /// its first row yields the error instead.
    pub fn sample(
        &self,
        chunks: &[SamplingRows],
    ) -> Vec<Result<Vec<SampledToken>, ConstraintError>> {
        // A lone constrained row (at most one per two compute threads) leaves a compute
        // thread idle in the forward pass, so its next mask is computed then; more rows are
        // masked in parallel here, as the step's rows are (one mask thread would queue them).
        let constrained = chunks.iter().filter(|c| c.constraint.is_some()).count();
        let ahead = constrained <= (ComputePool::global().threads() / 2).max(1);
        // On the compute pool, whose threads still spin from the forward pass: on rayon's
        // (asleep since the last step) the pool's spinning helper took a core from them,
        // and a lone row there would only add a wake-up to every one-user step.
        let mut sampled = Vec::with_capacity(chunks.len());
        sampled.resize_with(chunks.len(), || None);
        {
            let slots = Shards::new(&mut sampled[..]);
            ComputePool::global().run(chunks.len(), &|i| {
                let tokens = self.verify(&chunks[i], ahead);
                // SAFETY: task `i` alone writes slot `i`.
                unsafe { slots.range(i..i + 1)[0] = Some(tokens) };
            });
        }
        sampled
            .into_iter()
            .map(|s| s.expect("every row was sampled"))
            .collect()
    }

    /// The tokens one chunk yields, from its logit rows `first_row..=first_row + drafts`:
    /// each row is sampled exactly as a decode step at that position would sample it (the
    /// same history, bans and random stream, `step_rng(seed, output length)`), and verifying
    /// goes on while the token drawn equals the draft in the row after. So the tokens are
    /// those the sequence would have produced one step at a time, drafts or not.
    fn verify(
        &self,
        chunk: &SamplingRows,
        ahead: bool,
    ) -> Result<Vec<SampledToken>, ConstraintError> {
        let draft = chunk.drafts;
        // Prompt, output, then the tokens this verify has produced so far.
        let mut history = std::borrow::Cow::Borrowed(chunk.tokens);
        let mut tokens = Vec::with_capacity(1 + draft.len());
        for j in 0..=draft.len() {
            let output = &history[chunk.prompt_len..];
            let banned = chunk.params.banned_tokens(self.eos_token_ids, output.len());
            let ctx = SamplingContext {
                params: chunk.params,
                prompt: &chunk.tokens[..chunk.prompt_len],
                output,
                seed: chunk.seed,
                banned: &banned,
                allowed: None,
            };
            let row = self.row(chunk.first_row + j);
            let token = match chunk.constraint {
                None => Sampler::sample(row, &ctx),
                Some(cell) => match sample_constrained(cell, ahead, row, &ctx) {
                    Ok(token) => token,
                    // The tokens before stand; the next step meets the same failure.
                    Err(_) if !tokens.is_empty() => break,
                    Err(error) => return Err(error),
                },
            };
            let id = token.token_id;
            tokens.push(token);
            let finished = chunk.constraint.is_some_and(|c| c.is_finished());
            if j == draft.len() || draft.get(j) != Some(&id) || finished {
                break;
            }
            history.to_mut().push(id);
        }
        Ok(tokens)
    }

    /// Per chunk, the logprob of each prompt token at `positions + 1`, from the logit row of
    /// the position before it.
    pub fn score_prompts(&self, chunks: &[ScoringRows]) -> Vec<Vec<SampledToken>> {
        chunks
            .iter()
            .map(|chunk| {
                chunk
                    .positions
                    .clone()
                    .into_par_iter()
                    .map(|pos| {
                        let row = chunk.first_row + (pos - chunk.positions.start);
                        Sampler::score(self.row(row), chunk.tokens[pos + 1], chunk.top_k)
                    })
                    .collect()
            })
            .collect()
    }
}

/// Samples under the constraint's mask and advances it past the token drawn.
fn sample_constrained(
    cell: &ConstraintCell,
    ahead: bool,
    logits: &[f32],
    ctx: &SamplingContext,
) -> Result<SampledToken, ConstraintError> {
    let mut sampled = None;
    cell.sample_with(logits.len(), ahead, |mask| {
        let token = Sampler::sample(
            logits,
            &SamplingContext {
                allowed: Some(mask),
                ..*ctx
            },
        );
        let id = token.token_id;
        sampled = Some(token);
        id
    })?;
    sampled.ok_or_else(|| ConstraintError("the sampler drew no token".into()))
}
