//! `ReplyBuilder`: the OpenAI JSON shapes of completion and chat replies — whole replies,
//! stream chunks, usage and logprobs — for one request.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokenmill_engine::sample::sampled_token::SampledToken;

use crate::generate::choice_run::ChoiceDelta;
use crate::generate::choice_total::ChoiceTotal;
use crate::generate::reply_id::{unique_suffix, unix_now};
use crate::generate::request_plan::{EchoedPrompt, Endpoint};
use crate::text::tokenizer::Tokenizer;
use crate::tools::tool_call_parser::ToolCall;

/// JSON has no -inf; a token the model ruled out gets this instead (as vLLM does).
const LOWEST_LOGPROB: f32 = -9999.0;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache, reported as
    /// `prompt_tokens_details.cached_tokens` where the server was asked to
    /// (`--enable-prompt-tokens-details`).
    pub cached_tokens: Option<usize>,
}

impl Usage {
    pub fn json(&self) -> Value {
        let mut usage = json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        });
        if let Some(cached) = self.cached_tokens {
            usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
        }
        usage
    }
}

/// What a completions reply says about its prompts: `echo` repeats them (and, with `logprobs`,
/// scores them in `logprobs`), `prompt_logprobs` scores them in a list of its own (vLLM).
#[derive(Debug, Clone, Default)]
pub struct PromptReport {
    /// Per prompt, when `echo` is on: its text and its first token (which has no score).
    pub echoed: Vec<EchoedPrompt>,
    /// Alternatives per prompt token for `prompt_logprobs`.
    pub prompt_logprobs: Option<usize>,
    /// Choice `i` belongs to prompt `i / choices_per_prompt`.
    pub choices_per_prompt: usize,
}

pub struct ReplyBuilder {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
    tokenizer: Option<Arc<Tokenizer>>,
    /// Alternatives per token the request asked logprobs for, if it did.
    logprobs: Option<usize>,
    prompts: PromptReport,
    /// Tokens in logprobs are written `token_id:<id>`: text can be ambiguous, an id never is.
    tokens_as_ids: bool,
    /// Chat messages carry `reasoning_content` (the server has a reasoning parser).
    reasoning: bool,
    /// Chat's `echo`: text each choice's content starts with.
    chat_echo: Option<String>,
}

impl ReplyBuilder {
    pub fn new(
        endpoint: Endpoint,
        model: String,
        tokenizer: Option<Arc<Tokenizer>>,
        logprobs: Option<usize>,
    ) -> Self {
        let prefix = match endpoint {
            Endpoint::Completions => "cmpl",
            Endpoint::Chat => "chatcmpl",
        };
        Self {
            endpoint,
            id: format!("{prefix}-{}", unique_suffix()),
            created: unix_now(),
            model,
            tokenizer,
            logprobs,
            prompts: PromptReport::default(),
            tokens_as_ids: false,
            reasoning: false,
            chat_echo: None,
        }
    }

    /// A chat reply whose every choice starts with `echo` (chat's `echo`).
    pub fn with_chat_echo(self, chat_echo: Option<String>) -> Self {
        Self { chat_echo, ..self }
    }

    pub fn with_reasoning(self, reasoning: bool) -> Self {
        Self { reasoning, ..self }
    }

    pub fn with_tokens_as_ids(self, tokens_as_ids: bool) -> Self {
        Self {
            tokens_as_ids,
            ..self
        }
    }

    /// A completions reply that echoes or scores its prompts.
    pub fn with_prompts(self, prompts: PromptReport) -> Self {
        Self { prompts, ..self }
    }

    /// A whole non-streamed reply.
    pub fn full(&self, choices: &[ChoiceTotal], usage: Usage) -> Value {
        let choices: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(index, c)| match self.endpoint {
                Endpoint::Completions => self.full_completion(index, c),
                Endpoint::Chat => self.full_chat(index, c),
            })
            .collect();
        json!({
            "id": self.id,
            "object": self.object(false),
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage.json(),
        })
    }

    fn full_chat(&self, index: usize, c: &ChoiceTotal) -> Value {
        let text = match &self.chat_echo {
            Some(echo) => format!("{echo}{}", c.text),
            None => c.text.clone(),
        };
        let mut message = json!({"role": "assistant", "content": text});
        if !c.tool_calls.is_empty() {
            message["tool_calls"] = c.tool_calls.iter().map(whole_call).collect();
            // OpenAI's shape: a reply of calls alone has `content: null`.
            if text.is_empty() {
                message["content"] = Value::Null;
            }
        }
        if self.reasoning {
            // vLLM's shape: `null` when the reply held no reasoning.
            message["reasoning_content"] =
                Some(c.reasoning.as_str()).filter(|r| !r.is_empty()).into();
        }
        json!({
            "index": index,
            "message": message,
            "logprobs": self.logprobs_json(&c.tokens, 0),
            "finish_reason": c.finish_reason,
        })
    }

    /// A completions choice, with its prompt echoed and scored when asked.
    fn full_completion(&self, index: usize, c: &ChoiceTotal) -> Value {
        let echoed = self.echoed(index);
        let text = match echoed {
            Some(prompt) => format!("{}{}", prompt.text, c.text),
            None => c.text.clone(),
        };
        let logprobs = match echoed {
            Some(prompt) => self.echoed_logprobs(prompt, &(&c.prompt_logprobs, &c.tokens)),
            None => self.logprobs_json(&c.tokens, 0),
        };
        let mut choice = json!({
            "index": index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": c.finish_reason,
        });
        if self.prompts.prompt_logprobs.is_some() {
            choice["prompt_logprobs"] = self.prompt_logprobs_json(&c.prompt_logprobs);
        }
        choice
    }

    /// The prompt choice `index` echoes, under completions' `echo`.
    fn echoed(&self, index: usize) -> Option<&EchoedPrompt> {
        let per_prompt = self.prompts.choices_per_prompt.max(1);
        self.prompts.echoed.get(index / per_prompt)
    }

    /// Bytes of prompt text that open choice `index` under completions' `echo`.
    pub fn echoed_len(&self, index: usize) -> usize {
        self.echoed(index).map_or(0, |p| p.text.len())
    }

    /// `logprobs` of an echoed choice: its prompt's tokens (scored as `prompt_logprobs` scores
    /// them), then its output tokens, offsets counted from the start of the prompt.
    fn echoed_logprobs(
        &self,
        prompt: &EchoedPrompt,
        (scored, output): &(&Vec<SampledToken>, &Vec<SampledToken>),
    ) -> Value {
        let Some(k) = self.logprobs else {
            return Value::Null;
        };
        let all: Vec<SampledToken> = self
            .echoed_tokens(prompt.first_token, scored, k)
            .into_iter()
            .chain(output.iter().cloned())
            .collect();
        self.completion_logprobs(&all, 0)
    }

    /// The prompt as `logprobs` entries: the first token unscored, the rest with `k`
    /// alternatives (the engine may have computed more for `prompt_logprobs`).
    fn echoed_tokens(&self, first: u32, scored: &[SampledToken], k: usize) -> Vec<SampledToken> {
        let unscored = SampledToken {
            token_id: first,
            logprob: None,
            top_logprobs: Vec::new(),
        };
        std::iter::once(unscored)
            .chain(scored.iter().map(|t| SampledToken {
                top_logprobs: t.top_logprobs.iter().take(k).copied().collect(),
                ..t.clone()
            }))
            .collect()
    }

    /// vLLM's shape: `null` for the first prompt token, then per token a map from token id to
    /// `{logprob, decoded_token}` holding the prompt token and the top alternatives.
    fn prompt_logprobs_json(&self, scored: &[SampledToken]) -> Value {
        let k = self.prompts.prompt_logprobs.unwrap_or(0);
        let entry = |id: u32, logprob: f32| {
            (
                id.to_string(),
                json!({"logprob": finite(logprob), "decoded_token": self.token_text(id)}),
            )
        };
        let positions = scored.iter().map(|t| {
            let mut map: Map<String, Value> = t
                .top_logprobs
                .iter()
                .take(k)
                .map(|&(id, lp)| entry(id, lp))
                .collect();
            let (id, value) = entry(t.token_id, t.logprob.unwrap_or(f32::NEG_INFINITY));
            map.insert(id, value);
            Value::Object(map)
        });
        Value::Array(std::iter::once(Value::Null).chain(positions).collect())
    }

    /// The stream chunks of one delta: the text (and reasoning) chunk, then per completed
    /// tool call two chunks as OpenAI streams them: one opening the call (`index`, `id`,
    /// `type`, the name, empty `arguments`), one carrying its arguments. The role rides on
    /// the first chunk, logprobs too, and the finish reason on the last.
    pub fn chunks(
        &self,
        index: usize,
        delta: &ChoiceDelta,
        first: bool,
        text_offset: usize,
    ) -> Vec<Value> {
        // Chat's `echo` rides on each choice's first chunk, ahead of its first text.
        let echoed;
        let delta = match self.chat_echo.as_deref() {
            Some(echo) if first && !echo.is_empty() => {
                echoed = ChoiceDelta {
                    text: format!("{echo}{}", delta.text),
                    ..delta.clone()
                };
                &echoed
            }
            _ => delta,
        };
        if delta.tool_calls.is_empty() {
            return vec![self.chunk(index, delta, first, text_offset)];
        }
        let mut deltas = Vec::new();
        if !delta.text.is_empty() || !delta.reasoning.is_empty() {
            let mut message = Map::new();
            if !delta.reasoning.is_empty() {
                message.insert("reasoning_content".into(), delta.reasoning.clone().into());
            }
            if !delta.text.is_empty() {
                message.insert("content".into(), delta.text.clone().into());
            }
            deltas.push(message);
        }
        for call in &delta.tool_calls {
            let opening = json!([{
                "index": call.index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]);
            let arguments = json!([{
                "index": call.index,
                "function": {"arguments": call.arguments},
            }]);
            for tool_calls in [opening, arguments] {
                let mut message = Map::new();
                message.insert("tool_calls".into(), tool_calls);
                deltas.push(message);
            }
        }
        if first {
            deltas[0].insert("role".into(), "assistant".into());
        }
        let last = deltas.len() - 1;
        deltas
            .into_iter()
            .enumerate()
            .map(|(i, message)| {
                let logprobs = if i == 0 {
                    self.logprobs_json(&delta.tokens, text_offset)
                } else {
                    self.logprobs_json(&[], text_offset)
                };
                let finish_reason = if i == last { delta.finish_reason } else { None };
                self.envelope(vec![json!({
                    "index": index,
                    "delta": message,
                    "logprobs": logprobs,
                    "finish_reason": finish_reason,
                })])
            })
            .collect()
    }

    /// One stream chunk for one choice. `first` adds the chat role; `text_offset` is how much
    /// text this choice has already streamed.
    pub fn chunk(
        &self,
        index: usize,
        delta: &ChoiceDelta,
        first: bool,
        text_offset: usize,
    ) -> Value {
        let logprobs = self.logprobs_json(&delta.tokens, text_offset);
        let choice = match self.endpoint {
            Endpoint::Completions => match self.echoed(index).filter(|_| first) {
                // Completions' `echo` streamed: the prompt (scored, with `logprobs`) opens
                // the choice's first chunk, as the whole reply would open with it.
                Some(prompt) => json!({
                    "index": index,
                    "text": format!("{}{}", prompt.text, delta.text),
                    "logprobs": self.echoed_logprobs(prompt, &(&delta.prompt_logprobs, &delta.tokens)),
                    "finish_reason": delta.finish_reason,
                }),
                None => json!({
                    "index": index,
                    "text": delta.text,
                    "logprobs": logprobs,
                    "finish_reason": delta.finish_reason,
                }),
            },
            Endpoint::Chat => {
                let mut message = Map::new();
                if first {
                    message.insert("role".into(), "assistant".into());
                }
                if !delta.reasoning.is_empty() {
                    message.insert("reasoning_content".into(), delta.reasoning.clone().into());
                }
                // A chunk of reasoning alone has no content, as vLLM streams it.
                if !delta.text.is_empty() || delta.reasoning.is_empty() {
                    message.insert("content".into(), delta.text.clone().into());
                }
                json!({
                    "index": index,
                    "delta": message,
                    "logprobs": logprobs,
                    "finish_reason": delta.finish_reason,
                })
            }
        };
        self.envelope(vec![choice])
    }

    /// The closing chunk of a stream whose client asked for `include_usage`.
    pub fn usage_chunk(&self, usage: Usage) -> Value {
        let mut chunk = self.envelope(Vec::new());
        chunk["usage"] = usage.json();
        chunk
    }

    fn envelope(&self, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Completions, _) => "text_completion",
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
        }
    }

    fn logprobs_json(&self, tokens: &[SampledToken], text_offset: usize) -> Value {
        if self.logprobs.is_none() {
            return Value::Null;
        }
        match self.endpoint {
            Endpoint::Completions => self.completion_logprobs(tokens, text_offset),
            Endpoint::Chat => self.chat_logprobs(tokens),
        }
    }

    fn completion_logprobs(&self, tokens: &[SampledToken], mut text_offset: usize) -> Value {
        let mut texts = Vec::new();
        let mut logprobs = Vec::new();
        let mut tops = Vec::new();
        let mut offsets = Vec::new();
        for token in tokens {
            let text = self.token_text(token.token_id);
            offsets.push(text_offset);
            text_offset += text.len();
            texts.push(text);
            logprobs.push(token.logprob.map(finite));
            // An echoed prompt's first token has no score, so no alternatives either.
            let top = token.logprob.map(|_| {
                token
                    .top_logprobs
                    .iter()
                    .map(|&(id, lp)| (self.token_text(id), Value::from(finite(lp))))
                    .collect::<Map<String, Value>>()
            });
            tops.push(top);
        }
        json!({
            "tokens": texts,
            "token_logprobs": logprobs,
            "top_logprobs": tops,
            "text_offset": offsets,
        })
    }

    fn chat_logprobs(&self, tokens: &[SampledToken]) -> Value {
        // The engine computes the sampled token's logprob whenever logprobs are asked for,
        // which is the only time this runs; `null` would mark a broken promise, not a value.
        let entry = |id: u32, logprob: Option<f32>| {
            let text = self.token_text(id);
            json!({"token": text, "logprob": logprob.map(finite), "bytes": text.as_bytes()})
        };
        let content: Vec<Value> = tokens
            .iter()
            .map(|token| {
                let mut item = entry(token.token_id, token.logprob);
                item["top_logprobs"] = token
                    .top_logprobs
                    .iter()
                    .map(|&(id, lp)| entry(id, Some(lp)))
                    .collect();
                item
            })
            .collect();
        json!({ "content": content })
    }

    fn token_text(&self, id: u32) -> String {
        if self.tokens_as_ids {
            return format!("token_id:{id}");
        }
        self.tokenizer
            .as_ref()
            .and_then(|t| t.decode(&[id], false).ok())
            .unwrap_or_else(|| id.to_string())
    }
}

/// A call as `message.tool_calls` holds it.
fn whole_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

fn finite(logprob: f32) -> f32 {
    if logprob.is_finite() {
        logprob
    } else {
        LOWEST_LOGPROB
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: u32, logprob: f32) -> SampledToken {
        SampledToken {
            token_id: id,
            logprob: Some(logprob),
            top_logprobs: vec![(id, logprob)],
        }
    }

    #[test]
    fn chat_chunks_carry_the_role_only_first() {
        let reply = ReplyBuilder::new(Endpoint::Chat, "m".into(), None, None);
        let delta = ChoiceDelta {
            text: "hi".into(),
            ..Default::default()
        };
        let first = reply.chunk(0, &delta, true, 0);
        let later = reply.chunk(0, &delta, false, 2);
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["choices"][0]["delta"]["content"], "hi");
        assert!(later["choices"][0]["delta"].get("role").is_none());
        assert_eq!(first["object"], "chat.completion.chunk");
    }

    #[test]
    fn usage_totals_and_logprobs_survive_minus_infinity() {
        let reply = ReplyBuilder::new(Endpoint::Completions, "m".into(), None, Some(1));
        let choice = ChoiceTotal {
            text: "x".into(),
            tokens: vec![token(7, f32::NEG_INFINITY), token(8, -0.5)],
            finish_reason: Some("length"),
            ..Default::default()
        };
        let body = reply.full(
            &[choice],
            Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                cached_tokens: None,
            },
        );
        assert_eq!(body["usage"]["total_tokens"], 5);
        let logprobs = &body["choices"][0]["logprobs"];
        assert_eq!(logprobs["token_logprobs"][0], LOWEST_LOGPROB as f64);
        assert_eq!(logprobs["tokens"][1], "8");
        assert_eq!(logprobs["text_offset"], json!([0, 1]));
    }

    fn weather_call() -> ToolCall {
        ToolCall {
            index: 0,
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        }
    }

    #[test]
    fn a_streamed_call_opens_with_its_name_then_carries_its_arguments() {
        let reply = ReplyBuilder::new(Endpoint::Chat, "m".into(), None, None);
        let delta = ChoiceDelta {
            text: "Sure. ".into(),
            tool_calls: vec![weather_call()],
            finish_reason: Some("tool_calls"),
            ..Default::default()
        };
        let chunks = reply.chunks(0, &delta, true, 0);
        let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(chunks.len(), 3);
        assert_eq!(
            *deltas[0],
            json!({"role": "assistant", "content": "Sure. "})
        );
        assert_eq!(
            deltas[1]["tool_calls"],
            json!([{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}}])
        );
        assert_eq!(
            deltas[2]["tool_calls"],
            json!([{"index": 0, "function": {"arguments": r#"{"city":"Paris"}"#}}])
        );
        let reasons: Vec<&Value> = chunks
            .iter()
            .map(|c| &c["choices"][0]["finish_reason"])
            .collect();
        assert_eq!(reasons, [&Value::Null, &Value::Null, &json!("tool_calls")]);
    }

    #[test]
    fn a_reply_of_calls_alone_has_null_content() {
        let reply = ReplyBuilder::new(Endpoint::Chat, "m".into(), None, None);
        let choice = ChoiceTotal {
            tool_calls: vec![weather_call()],
            finish_reason: Some("tool_calls"),
            ..Default::default()
        };
        let body = reply.full(&[choice], Usage::default());
        let message = &body["choices"][0]["message"];
        assert_eq!(message["content"], Value::Null);
        assert_eq!(message["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(message["tool_calls"][0]["id"], "call_1");
        let plain = reply.full(&[ChoiceTotal::default()], Usage::default());
        assert_eq!(plain["choices"][0]["message"]["content"], "");
        assert!(plain["choices"][0]["message"].get("tool_calls").is_none());
    }
}
