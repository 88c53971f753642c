//! `SpecDecodeStats`: vLLM's speculative-decoding counters (drafts, draft tokens, accepted
//! tokens, and accepted tokens per draft position).

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecDecodeStats {
    /// Verify chunks that carried at least one draft.
    pub num_drafts: u64,
    /// Draft tokens verified.
    pub num_draft_tokens: u64,
    /// Draft tokens that equalled the target's own token.
    pub num_accepted_tokens: u64,
    /// `[k]`: how often the draft at position i (0-based) was accepted.
    pub num_accepted_tokens_per_pos: Vec<u64>,
}

impl SpecDecodeStats {
    /// Records one verify: `drafted` tokens offered, the first `accepted` of them taken.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.num_drafts += 1;
        self.num_draft_tokens += drafted as u64;
        self.num_accepted_tokens += accepted as u64;
        if self.num_accepted_tokens_per_pos.len() < drafted {
            self.num_accepted_tokens_per_pos.resize(drafted, 0);
        }
        for n in &mut self.num_accepted_tokens_per_pos[..accepted] {
            *n += 1;
        }
    }
}
