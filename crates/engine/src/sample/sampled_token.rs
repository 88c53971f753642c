//! `SampledToken`: one token the sampler drew, with its logprob and top alternatives when
//! the request asked for them.

#[derive(Debug, Clone, PartialEq)]
pub struct SampledToken {
    pub token_id: u32,
    /// Log-probability of the chosen token under the model's raw distribution, when the
    /// request asked for logprobs (the log-sum-exp over the vocabulary costs a pass).
    pub logprob: Option<f32>,
    /// The most likely tokens and their logprobs, when the request asked for them.
    pub top_logprobs: Vec<(u32, f32)>,
}
