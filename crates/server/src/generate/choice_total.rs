//! `ChoiceTotal`: everything one choice produced, gathered from its deltas for a reply that
//! is not streamed.

use tokenmill_engine::sample::sampled_token::SampledToken;

use crate::generate::choice_run::ChoiceDelta;
use crate::tools::tool_call_parser::ToolCall;

/// Everything one choice produced, for a non-streamed reply.
#[derive(Debug, Default)]
pub struct ChoiceTotal {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub tokens: Vec<SampledToken>,
    pub prompt_logprobs: Vec<SampledToken>,
    pub finish_reason: Option<&'static str>,
    pub cached_prompt_tokens: Option<usize>,
}

impl ChoiceTotal {
    pub fn absorb(&mut self, delta: ChoiceDelta) {
        self.text.push_str(&delta.text);
        self.reasoning.push_str(&delta.reasoning);
        self.tool_calls.extend(delta.tool_calls);
        self.prompt_logprobs.extend(delta.prompt_logprobs);
        self.tokens.extend(delta.tokens);
        self.finish_reason = delta.finish_reason.or(self.finish_reason);
        self.cached_prompt_tokens = delta.cached_prompt_tokens.or(self.cached_prompt_tokens);
    }
}
