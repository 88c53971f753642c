//! `Completion`: everything about one finished request, for offline use (`generate`, tests).

use crate::sample::sampled_token::SampledToken;
use crate::sched::request::{FinishReason, RequestEvent, RequestTimings};
use tokio::sync::mpsc::UnboundedReceiver;

/// Everything about one finished request, for offline use (`generate`, tests).
#[derive(Debug, Clone)]
pub struct Completion {
    pub prompt_tokens: usize,
    /// Scores of prompt tokens `1..` when the request asked for prompt logprobs.
    pub prompt_logprobs: Vec<SampledToken>,
    pub tokens: Vec<SampledToken>,
    pub finish_reason: FinishReason,
    pub cached_prompt_tokens: usize,
    pub timings: RequestTimings,
}

impl Completion {
    pub fn token_ids(&self) -> Vec<u32> {
        self.tokens.iter().map(|t| t.token_id).collect()
    }
}

/// Drains a finished request's events into a `Completion`.
/// `None` if the request has not finished.
pub fn collect_completion(mut rx: UnboundedReceiver<RequestEvent>) -> Option<Completion> {
    let mut tokens = Vec::new();
    let mut prompt_logprobs = Vec::new();
    while let Ok(event) = rx.try_recv() {
        match event {
            RequestEvent::PromptLogprobs { logprobs } => prompt_logprobs.extend(logprobs),
            RequestEvent::Token { token, .. } => tokens.push(token),
            // Only embedding requests send one; a completion has none.
            RequestEvent::Embedding { .. } => {}
            RequestEvent::Finished {
                reason,
                prompt_tokens,
                cached_prompt_tokens,
                timings,
                ..
            } => {
                return Some(Completion {
                    prompt_tokens,
                    prompt_logprobs,
                    tokens,
                    finish_reason: reason,
                    cached_prompt_tokens,
                    timings: *timings,
                })
            }
        }
    }
    None
}
