//! A step's results applied to its sequences: tokens appended up to a stop, computed counts
//! advanced, full blocks offered to the prefix cache, finished sequences freed.

use super::{Scheduler, SchedulerConfig};
use crate::kv::block_manager::BlockHash;
use crate::sample::sampled_token::SampledToken;
use crate::sched::request::{FinishReason, SeqId};
use crate::sched::scheduler_output::{SchedulerOutput, SeqUpdate};
use crate::sched::sequence::Sequence;
use std::collections::HashMap;
use std::time::Instant;

impl Scheduler {
    /// Adds the step's final hidden states (`hidden`, `width` floats a row, in batch order)
    /// to the pools of the embedding sequences that asked for them. Runs before `update`,
    /// which ends those whose prompt this step finished.
    pub fn pool_hidden(&mut self, out: &SchedulerOutput, hidden: &[f32], width: usize) {
        let mut offset = 0;
        for (chunk, batch_seq) in out.chunks.iter().zip(&out.batch.seqs) {
            let rows = batch_seq.hidden_rows.len();
            if rows == 0 {
                continue;
            }
            let states = &hidden[offset * width..(offset + rows) * width];
            offset += rows;
            let Some(i) = self.running_index(chunk.seq_id) else {
                continue;
            };
            if let Some(pool) = &mut self.running[i].pool {
                pool.add(states, width);
            }
        }
    }

    /// Records a step's results: sampled tokens are appended (a verify's accepted drafts
    /// and the token after them, up to a stop), computed counts advance over the KV that
    /// holds real tokens, full blocks enter the prefix cache, and finished sequences leave
    /// with their blocks freed.
    ///
    /// `sampled` holds, per sampling sequence, its tokens in order; with drafts, every token
    /// but the last equals the draft at its position (the engine stops verifying at the first
    /// that does not).
    pub fn update(
        &mut self,
        out: &SchedulerOutput,
        sampled: Vec<(SeqId, Vec<SampledToken>)>,
    ) -> Vec<SeqUpdate> {
        let now = Instant::now();
        let mut sampled: HashMap<SeqId, Vec<SampledToken>> = sampled.into_iter().collect();
        let mut updates = Vec::with_capacity(sampled.len());
        for chunk in &out.chunks {
            let tokens = sampled.remove(&chunk.seq_id).unwrap_or_default();
            let Some(i) = self.running_index(chunk.seq_id) else {
                continue;
            };
            let seq = &mut self.running[i];
            // A verify keeps the keys of its first row and of each accepted draft; rows
            // after a rejection hold keys of tokens that never were, and are overwritten
            // when their positions are computed for real.
            let computed = if chunk.drafts > 0 {
                let accepted = tokens.len().saturating_sub(1).min(chunk.drafts);
                self.stats.spec_decode.observe(chunk.drafts, accepted);
                seq.acceptance.observe(chunk.drafts, accepted);
                1 + accepted
            } else {
                if chunk.sample {
                    seq.acceptance.forget();
                }
                chunk.len
            };
            seq.drafts.clear();
            if !chunk.prompt_logits.is_empty() {
                seq.prompt_logits_next = chunk.prompt_logits.end;
            }
            let mut added = Vec::with_capacity(tokens.len());
            let mut reason = None;
            let count = tokens.len();
            for (j, token) in tokens.into_iter().enumerate() {
                seq.tokens.push(token.token_id);
                if seq.timings.first_token.is_none() {
                    seq.timings.first_token = Some(now);
                }
                seq.timings.token_times.push(now);
                added.push(token);
                // The constraint has seen all of this step's tokens; the engine stops
                // verifying where it completes, so only the last token can finish it.
                reason = stop_reason(&self.config, seq, j + 1 == count);
                if reason.is_some() {
                    break;
                }
            }
            // A stop inside a verify leaves fewer tokens than the rows computed.
            seq.num_computed = (seq.num_computed + computed).min(seq.tokens.len());
            // An embedding ends with its prompt: its vector is pooled, nothing is decoded.
            if seq.pool.is_some() && seq.num_computed == seq.prompt_len {
                reason = Some(FinishReason::Stop);
            }
            self.register_full_blocks(i);
            let finished = reason.map(|reason| {
                let mut seq = self.running.remove(i);
                seq.finish = Some(reason);
                seq.timings.finished = Some(now);
                self.free_blocks(&mut seq);
                seq
            });
            if !added.is_empty() || finished.is_some() {
                updates.push(SeqUpdate {
                    seq_id: chunk.seq_id,
                    tokens: added,
                    time: now,
                    finished,
                });
            }
        }
        updates
    }

    fn register_full_blocks(&mut self, i: usize) {
        let bs = self.blocks.block_size();
        let seq = &mut self.running[i];
        while (seq.block_hashes.len() + 1) * bs <= seq.num_computed {
            let b = seq.block_hashes.len();
            let tokens = &seq.tokens[b * bs..(b + 1) * bs];
            let parent = seq.block_hashes.last().copied();
            // One key for the block, a page of it in each group that holds one.
            let hash = BlockHash::chain(parent, tokens);
            for (group, table) in seq.block_tables.iter().enumerate() {
                if let Some(id) = table.get(b) {
                    self.blocks.register_keyed(group, id, hash, parent, tokens);
                }
            }
            seq.block_hashes.push(hash);
        }
    }
}

/// Why the sequence ends with its last token, if it does; `step_end`: that token is the
/// last of the step's (the only one a completed constraint can have ended on).
fn stop_reason(config: &SchedulerConfig, seq: &Sequence, step_end: bool) -> Option<FinishReason> {
    let last = *seq.tokens.last()?;
    let n = seq.output().len();
    let p = &seq.params;
    if step_end && seq.constraint.as_ref().is_some_and(|c| c.is_finished()) {
        return Some(FinishReason::Stop);
    }
    let eos = !p.ignore_eos && config.eos_token_ids.contains(&last);
    if n >= p.min_tokens && (eos || p.stop_token_ids.contains(&last)) {
        return Some(FinishReason::Stop);
    }
    if n >= p.max_tokens || seq.tokens.len() >= config.max_model_len {
        return Some(FinishReason::Length);
    }
    None
}
