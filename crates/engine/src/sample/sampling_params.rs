//! `SamplingParams`: how one request picks its tokens and when it stops, validated once.

use crate::error::{EngineError, Result};
use crate::sample::logit_bias::LogitBias;
use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: f32,
    pub min_p: f32,
    /// Makes sampling reproducible whatever else is batched alongside.
    pub seed: Option<u64>,
    pub repetition_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub max_tokens: usize,
    pub min_tokens: usize,
    /// Checked after every token, so a set: membership costs the same however many there are.
    pub stop_token_ids: BTreeSet<u32>,
    pub ignore_eos: bool,
    /// Return this many most likely alternatives (with their logprobs) for every token;
    /// `Some(0)` means none (the chosen token's own logprob is always reported).
    pub logprobs: Option<usize>,
    /// Report the logprob of every prompt token after the first (given the tokens before it),
    /// with this many alternatives. Such a request computes its whole prompt: a prefix-cache
    /// hit would leave cached positions without logits.
    pub prompt_logprobs: Option<usize>,
    /// Added to the logits before penalties, temperature and truncation.
    pub logit_bias: LogitBias,
    /// Whether the engine may verify drafted tokens for this request (when speculative
    /// decoding is configured). Outputs are the same either way; a client opts out to keep
    /// its request's steps at one token each.
    pub speculative: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            max_tokens: 16,
            min_tokens: 0,
            stop_token_ids: BTreeSet::new(),
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: None,
            logit_bias: LogitBias::default(),
            speculative: true,
        }
    }
}

/// The most alternatives a request may ask logprobs for.
pub const MAX_LOGPROBS: usize = 20;

impl SamplingParams {
    pub fn greedy(max_tokens: usize) -> Self {
        Self {
            temperature: 0.0,
            max_tokens,
            ..Self::default()
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Tokens that may not be output token number `output_len` (0-based): the stop tokens,
    /// and the model's `eos_token_ids` unless EOS is ignored, until `min_tokens` are out. A
    /// verify asks for positions ahead of the output.
    pub fn banned_tokens(&self, eos_token_ids: &[u32], output_len: usize) -> Vec<u32> {
        if output_len >= self.min_tokens {
            return Vec::new();
        }
        let mut banned: Vec<u32> = self.stop_token_ids.iter().copied().collect();
        if !self.ignore_eos {
            banned.extend(eos_token_ids);
        }
        banned
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if self.top_k == Some(0) {
            return bad("top_k must be at least 1 (omit it to disable)".into());
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return bad(format!(
                "repetition_penalty must be > 0, got {}",
                self.repetition_penalty
            ));
        }
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if self.max_tokens == 0 {
            return bad("max_tokens must be at least 1".into());
        }
        if self.min_tokens > self.max_tokens {
            return bad(format!(
                "min_tokens ({}) exceeds max_tokens ({})",
                self.min_tokens, self.max_tokens
            ));
        }
        if self.logprobs.is_some_and(|k| k > MAX_LOGPROBS) {
            return bad(format!(
                "logprobs may ask for at most {MAX_LOGPROBS} alternatives"
            ));
        }
        if self.prompt_logprobs.is_some_and(|k| k > MAX_LOGPROBS) {
            return bad(format!(
                "prompt_logprobs may ask for at most {MAX_LOGPROBS} alternatives"
            ));
        }
        Ok(())
    }
}
