//! What crosses the engine's boundary: requests in, per-request events out.

use crate::config::PoolerConfig;
use crate::sample::sampled_token::SampledToken;
use crate::sample::sampling_params::SamplingParams;
use crate::sample::token_constraint::ConstraintCell;
use std::time::Instant;

/// Identifies one request (one sequence) for its whole life in the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Lower runs first under the priority policy (as in vLLM).
    pub priority: i32,
    /// Which tokens may come next (structured output); `None` allows any.
    pub constraint: Option<ConstraintCell>,
}

/// A prefill-only request: its prompt runs through the model like any prompt (in chunks,
/// under the one token budget), nothing is decoded, its pages are freed as its last chunk
/// is done, and it ends with the pooled final hidden state ([`RequestEvent::Embedding`]).
#[derive(Debug, Clone)]
pub struct EmbedRequest {
    pub prompt: Vec<u32>,
    pub pooling: PoolerConfig,
    /// Lower runs first under the priority policy, as for [`Request`].
    pub priority: i32,
}

/// What a queued request asks the engine for.
#[derive(Debug, Clone)]
pub enum EngineRequest {
    /// Boxed: a request's sampling settings are ten times an embedding request's size.
    Generate(Box<Request>),
    Embed(EmbedRequest),
}

impl From<Request> for EngineRequest {
    fn from(request: Request) -> Self {
        Self::Generate(Box::new(request))
    }
}

impl From<EmbedRequest> for EngineRequest {
    fn from(request: EmbedRequest) -> Self {
        Self::Embed(request)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// EOS or one of the request's stop token ids.
    Stop,
    /// max_tokens or max_model_len reached.
    Length,
    /// The client went away or asked to cancel.
    Abort,
    /// The step computing it failed (an error or a panic in the model); see the server log.
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
            Self::Error => "error",
        }
    }
}

/// Wall-clock milestones of one request, for TTFT/TPOT/ITL metrics.
#[derive(Debug, Clone)]
pub struct RequestTimings {
    pub arrival: Instant,
    pub first_scheduled: Option<Instant>,
    pub first_token: Option<Instant>,
    pub token_times: Vec<Instant>,
    pub finished: Option<Instant>,
}

impl RequestTimings {
    pub fn new(arrival: Instant) -> Self {
        Self {
            arrival,
            first_scheduled: None,
            first_token: None,
            token_times: Vec::new(),
            finished: None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum RequestEvent {
    /// Scores of the next prompt tokens, in order from the second (prompt logprobs); each
    /// `SampledToken` holds the prompt token, its logprob and the top alternatives there.
    PromptLogprobs {
        logprobs: Vec<SampledToken>,
    },
    Token {
        token: SampledToken,
        time: Instant,
    },
    /// An embedding request's pooled vector (`hidden_size` wide), sent just before its
    /// `Finished` (which then says `Stop`); a request that fails or is aborted has none.
    Embedding {
        values: Vec<f32>,
    },
    Finished {
        reason: FinishReason,
        prompt_tokens: usize,
        completion_tokens: usize,
        /// Prompt tokens served from the prefix cache instead of computed.
        cached_prompt_tokens: usize,
        timings: Box<RequestTimings>,
    },
}
