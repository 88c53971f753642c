//! `Proposer`: the one interface every drafting method implements.

use crate::sched::request::SeqId;

/// Proposes draft tokens for running sequences. Proposals must be deterministic functions of
/// what the proposer has been shown (the sequence's tokens and, for methods that learn across
/// requests, the finished ones), so a run is reproducible; exactness never depends on them,
/// since every draft is verified against the target model.
pub trait Proposer: Send + Sync {
    /// Up to `max` tokens that may follow `tokens` (the request's prompt, its first
    /// `prompt_len` tokens, then its output so far). Empty when it has no guess.
    fn propose(&mut self, id: SeqId, tokens: &[u32], prompt_len: usize, max: usize) -> Vec<u32>;

    /// The request left the engine with these tokens (prompt then output): a proposer that
    /// learns from recent requests takes its output in, and any per-request state is dropped.
    fn finished(&mut self, _id: SeqId, _tokens: &[u32], _prompt_len: usize) {}
}
