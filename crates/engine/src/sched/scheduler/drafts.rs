//! Which drafts a step verifies: the decodes that may take drafts, and how many of each
//! pay for themselves under the step cost model at the sequence's acceptance so far.

use super::Scheduler;
use crate::sched::request::SeqId;
use crate::sched::step_cost_model::StepShape;

/// The least forecast rise in a step's tokens per second for which its drafts are verified.
pub const MIN_DRAFT_GAIN: f64 = 1.1;

impl Scheduler {
    /// Running decodes that may verify drafts next step, each with the most drafts it may
    /// take: `most`, less where `max_tokens` or the context would end the sequence sooner,
    /// or where the step cost model says more would not pay at its acceptance so far.
    /// The engine asks its proposer for these and hands them back with [`set_drafts`](Self::set_drafts).
    pub fn draft_candidates(&self, most: usize) -> Vec<(SeqId, usize)> {
        let room: Vec<usize> = self
            .running
            .iter()
            .map(|s| {
                if !(s.is_decoding() && s.params.speculative) {
                    return 0;
                }
                // The step adds the token after the drafts too.
                let left = s.params.max_tokens.saturating_sub(s.output().len() + 1);
                let context = self.config.max_model_len.saturating_sub(s.tokens.len() + 1);
                most.min(left).min(context)
            })
            .collect();
        // Drafting costs too (a draft model runs a forward pass per draft): where even
        // drafts sure to exist would not pay, none are asked for.
        let worth = match self.keep_all_drafts {
            true => None,
            false => self.draft_lengths(&room),
        };
        let worth = worth.unwrap_or_else(|| room.clone());
        self.running
            .iter()
            .zip(worth)
            .filter(|(_, k)| *k > 0)
            .map(|(s, k)| (s.id, k))
            .collect()
    }

    /// The proposer's drafts for a running sequence; the next `schedule` verifies as many of
    /// them as pay for themselves.
    pub fn set_drafts(&mut self, id: SeqId, drafts: Vec<u32>) {
        if let Some(i) = self.running_index(id) {
            self.running[i].drafts = drafts;
        }
    }

    /// Cuts each decode's drafts to what [`draft_lengths`](Self::draft_lengths) keeps.
    pub(super) fn trim_drafts(&mut self) {
        if self.keep_all_drafts || self.running.iter().all(|s| s.drafts.is_empty()) {
            return;
        }
        let available: Vec<usize> = self.running.iter().map(|s| s.drafts.len()).collect();
        if let Some(keep) = self.draft_lengths(&available) {
            for (seq, k) in self.running.iter_mut().zip(keep) {
                seq.drafts.truncate(k);
            }
        }
    }

    /// How many of `available[i]` drafts running sequence `i` should verify: one at a time,
    /// always the draft most likely to be accepted (the next one of the sequence whose kept
    /// drafts are most likely all accepted), while the expected tokens it adds outweigh the
    /// time the step cost model says it adds. At one user a decode step is weight-bound and
    /// a few more rows cost little, so drafts stay; in a large batch every row costs its full
    /// share, and none do. `None` until the model has seen enough steps.
    fn draft_lengths(&self, available: &[usize]) -> Option<Vec<usize>> {
        let decoding: Vec<usize> = (0..self.running.len())
            .filter(|&i| self.running[i].is_decoding())
            .collect();
        // Prompt work waiting for the budget: a draft row would take a token of it, and a
        // prompt token is sure progress where a draft is only likely to be.
        if decoding.len() < self.running.len() || !self.waiting.is_empty() {
            return Some(vec![0; self.running.len()]);
        }
        let mut shape = decoding.iter().fold(StepShape::default(), |acc, &i| {
            acc.plus(StepShape::chunk(self.running[i].num_computed, 1))
        });
        let mut seconds = self.cost.predict(shape).filter(|&t| t > 0.0)?;
        let base_rate = decoding.len() as f64 / seconds;
        let mut keep = vec![0usize; self.running.len()];
        let mut expected = decoding.len() as f64;
        loop {
            let best = decoding
                .iter()
                .filter(|&&i| keep[i] < available[i])
                .map(|&i| (i, self.running[i].acceptance.p().powi(keep[i] as i32 + 1)))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
            let Some((i, gain)) = best else { break };
            // The draft's row sits at position num_computed + 1 + keep and sees that many + 1.
            let row = StepShape {
                tokens: 1,
                context: self.running[i].num_computed + 2 + keep[i],
                seqs: 0,
            };
            let Some(longer) = self.cost.predict(shape.plus(row)) else {
                break;
            };
            if (expected + gain) / longer <= expected / seconds {
                break;
            }
            expected += gain;
            seconds = longer;
            shape = shape.plus(row);
            keep[i] += 1;
        }
        tracing::trace!(
            "drafts kept {keep:?} of {available:?}; predicted {seconds:.4}s, {expected:.2} tokens"
        );
        // A forecast gain within the model's error is no gain: a predicted gain of a few
        // percent is as likely a loss (docs/speculative-decoding.md).
        if expected / seconds < MIN_DRAFT_GAIN * base_rate {
            keep.fill(0);
        }
        Some(keep)
    }
}
