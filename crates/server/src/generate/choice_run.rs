//! `ChoiceRun`: one queued engine request seen as one choice of a reply — its tokens turned
//! into text deltas, stop strings applied, and its end recorded in the metrics.
//!
//! Dropping an unfinished run (a client that went away) aborts its engine request. When the
//! server closes its replies at shutdown, a run ends at once with finish reason `abort` (the
//! reason vLLM gives a request it aborts), so a stream still gets its final chunk and `[DONE]`.

use std::sync::Arc;

use tokenmill_engine::sample::sampled_token::SampledToken;
use tokenmill_engine::{EngineHandle, RequestEvent, SeqId};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

use crate::metrics::{FinishedRequest, Metrics};
use crate::text::detokenizer::IncrementalDetokenizer;
use crate::text::tokenizer::Tokenizer;
use crate::tools::reasoning_parser::{ReasoningDelivery, ReasoningParser, ReasoningParserKind};
use crate::tools::tool_call_parser::{ToolCall, ToolCallParser};

/// How many prompt tokens the detokenizer sees as context, so the first generated word
/// decodes with the spacing it has after the prompt.
const PROMPT_CONTEXT_TOKENS: usize = 4;

/// What a run produced since it was last asked: text that is safe to show (never a partial
/// character, never part of a stop string), the tokens behind it, and maybe the end.
#[derive(Debug, Default, Clone)]
pub struct ChoiceDelta {
    pub text: String,
    /// Reasoning split off the text by the server's `--reasoning-parser` (chat only).
    pub reasoning: String,
    /// Tool calls completed in this delta (chat requests with tools).
    pub tool_calls: Vec<ToolCall>,
    pub tokens: Vec<SampledToken>,
    /// Scores of prompt tokens from the second on, when the request asked for them.
    pub prompt_logprobs: Vec<SampledToken>,
    /// `stop`, `tool_calls`, `length` or `abort`, on the last delta only.
    pub finish_reason: Option<&'static str>,
    /// Prompt tokens the engine took from its prefix cache, on the last delta only (when the
    /// engine reported its end).
    pub cached_prompt_tokens: Option<usize>,
    /// The stop string that ended the choice, on the last delta only (Anthropic's replies
    /// name it in `stop_sequence`).
    pub stop_string: Option<String>,
}

/// Turns token ids into text. Models without a tokenizer (dummy weights) show each id as text,
/// so streams still carry visible content per token.
enum TextDecoder {
    Detokenizer(IncrementalDetokenizer),
    Ids,
}

/// The pieces a run is made from, beyond its engine stream.
pub struct ChoiceSetup {
    pub handle: EngineHandle,
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub metrics: Arc<Metrics>,
    pub prompt: Vec<u32>,
    pub stop: Vec<String>,
    pub include_stop: bool,
    pub skip_special_tokens: bool,
    /// How reasoning is marked in this choice's text, when it is to be split off, and what
    /// is done with it then.
    pub reasoning: Option<(ReasoningParserKind, ReasoningDelivery)>,
    /// Splits tool calls from the content, when the request offered tools.
    pub tool_calls: Option<ToolCallParser>,
    /// Becomes `true` when the server ends every open reply (shutdown).
    pub closing: watch::Receiver<bool>,
}

pub struct ChoiceRun {
    handle: EngineHandle,
    id: SeqId,
    events: UnboundedReceiver<RequestEvent>,
    decoder: TextDecoder,
    reasoning: Option<(ReasoningParser, ReasoningDelivery)>,
    /// Reasoning split off but not shown yet (`ReasoningDelivery::Whole`).
    held_reasoning: String,
    tool_calls: Option<ToolCallParser>,
    metrics: Arc<Metrics>,
    prompt_tokens: usize,
    completion_tokens: usize,
    finished: bool,
    closing: watch::Receiver<bool>,
}

impl ChoiceRun {
    pub fn new(setup: ChoiceSetup, id: SeqId, events: UnboundedReceiver<RequestEvent>) -> Self {
        let tail = &setup.prompt[setup.prompt.len().saturating_sub(PROMPT_CONTEXT_TOKENS)..];
        let decoder = match setup.tokenizer {
            Some(tokenizer) => TextDecoder::Detokenizer(
                IncrementalDetokenizer::new(tokenizer, tail, setup.stop, setup.skip_special_tokens)
                    .including_stop_strings(setup.include_stop),
            ),
            None => TextDecoder::Ids,
        };
        Self {
            handle: setup.handle,
            id,
            events,
            decoder,
            reasoning: setup
                .reasoning
                .map(|(kind, delivery)| (ReasoningParser::new(kind), delivery)),
            held_reasoning: String::new(),
            tool_calls: setup.tool_calls,
            metrics: setup.metrics,
            prompt_tokens: setup.prompt.len(),
            completion_tokens: 0,
            finished: false,
            closing: setup.closing,
        }
    }

    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    pub fn completion_tokens(&self) -> usize {
        self.completion_tokens
    }

    /// Waits until there is text to show or the choice ends; `None` after the end. With a
    /// reasoning parser, the text is split into reasoning and content; with a tool-call
    /// parser, calls are split from the content. Text a parser holds back does not count as
    /// something to show: its tokens ride along with the next delta that shows something.
    pub async fn next_delta(&mut self) -> Option<ChoiceDelta> {
        let mut waiting: Option<ChoiceDelta> = None;
        loop {
            let mut delta = self.next_split_delta().await?;
            if let Some(earlier) = waiting.take() {
                let mut tokens = earlier.tokens;
                tokens.append(&mut delta.tokens);
                delta.tokens = tokens;
                let mut scored = earlier.prompt_logprobs;
                scored.append(&mut delta.prompt_logprobs);
                delta.prompt_logprobs = scored;
            }
            let shows = !delta.text.is_empty()
                || !delta.reasoning.is_empty()
                || !delta.tool_calls.is_empty()
                || delta.finish_reason.is_some();
            if shows {
                return Some(delta);
            }
            waiting = Some(delta);
        }
    }

    async fn next_split_delta(&mut self) -> Option<ChoiceDelta> {
        let mut delta = self.next_text_delta().await?;
        if let Some((parser, delivery)) = &mut self.reasoning {
            let mut split = parser.push(&delta.text);
            if delta.finish_reason.is_some() {
                let rest = parser.finish();
                split.reasoning.push_str(&rest.reasoning);
                split.content.push_str(&rest.content);
            }
            delta.text = split.content;
            delta.reasoning = match delivery {
                ReasoningDelivery::Stream => split.reasoning,
                ReasoningDelivery::Dropped => String::new(),
                // Held until content (or the end) shows the reasoning is over.
                ReasoningDelivery::Whole => {
                    self.held_reasoning.push_str(&split.reasoning);
                    if delta.text.is_empty() && delta.finish_reason.is_none() {
                        String::new()
                    } else {
                        std::mem::take(&mut self.held_reasoning)
                    }
                }
            };
        }
        if let Some(parser) = &mut self.tool_calls {
            let mut split = parser.push(&delta.text);
            if delta.finish_reason.is_some() {
                let rest = parser.finish();
                split.content.push_str(&rest.content);
                split.calls.extend(rest.calls);
            }
            delta.text = split.content;
            delta.tool_calls = split.calls;
            // OpenAI's reason for a reply that ended to let its calls run; a reply cut by
            // `max_tokens` still says `length`.
            if delta.finish_reason == Some("stop") && parser.calls() > 0 {
                delta.finish_reason = Some("tool_calls");
            }
        }
        Some(delta)
    }

    async fn next_text_delta(&mut self) -> Option<ChoiceDelta> {
        if self.finished {
            return None;
        }
        let mut delta = ChoiceDelta::default();
        loop {
            let event = tokio::select! {
                // Closing is looked at first: a reader slower than the engine always has an
                // event waiting, and would otherwise not end before the drain limit.
                biased;
                () = replies_closed(&mut self.closing) => {
                    self.handle.abort(self.id);
                    delta.text.push_str(&self.flush());
                    self.finish("abort", None);
                    delta.finish_reason = Some("abort");
                    return Some(delta);
                }
                event = self.events.recv() => event,
            };
            match event {
                Some(RequestEvent::PromptLogprobs { logprobs }) => {
                    delta.prompt_logprobs.extend(logprobs);
                }
                // Only embedding requests send one; a choice is a generate request.
                Some(RequestEvent::Embedding { .. }) => {}
                Some(RequestEvent::Token { token, .. }) => {
                    self.completion_tokens += 1;
                    let (text, stopped) = self.decode(token.token_id);
                    delta.text.push_str(&text);
                    delta.tokens.push(token);
                    if stopped.is_some() {
                        delta.stop_string = stopped;
                        delta.cached_prompt_tokens = self.end_at_stop_string().await;
                        delta.finish_reason = Some("stop");
                        return Some(delta);
                    }
                    if !delta.text.is_empty() {
                        return Some(delta);
                    }
                }
                Some(RequestEvent::Finished {
                    reason,
                    timings,
                    cached_prompt_tokens,
                    ..
                }) => {
                    delta.cached_prompt_tokens = Some(cached_prompt_tokens);
                    delta.text.push_str(&self.flush());
                    let reason = reason.as_str();
                    self.finish(reason, Some(&timings));
                    delta.finish_reason = Some(reason);
                    return Some(delta);
                }
                None => {
                    // The engine stopped without reporting an end (shutdown).
                    delta.text.push_str(&self.flush());
                    self.finish("abort", None);
                    delta.finish_reason = Some("abort");
                    return Some(delta);
                }
            }
        }
    }

    /// Text for one more token, and the stop string it completed, if any.
    fn decode(&mut self, token_id: u32) -> (String, Option<String>) {
        match &mut self.decoder {
            TextDecoder::Detokenizer(detok) => match detok.push(token_id) {
                Ok(step) => (step.text, step.stopped),
                Err(error) => {
                    tracing::warn!("detokenizing token {token_id} failed: {error}");
                    (String::new(), None)
                }
            },
            TextDecoder::Ids => (format!("{token_id} "), None),
        }
    }

    fn flush(&mut self) -> String {
        match &mut self.decoder {
            TextDecoder::Detokenizer(detok) => detok.finish(),
            TextDecoder::Ids => String::new(),
        }
    }

    /// The engine does not know about stop strings: cancel it, then wait (at most a step) for
    /// its end report so the request's timings still reach the metrics. Gives the prompt
    /// tokens it found cached, from that report.
    async fn end_at_stop_string(&mut self) -> Option<usize> {
        self.handle.abort(self.id);
        let mut end = None;
        while let Some(event) = self.events.recv().await {
            if let RequestEvent::Finished {
                timings,
                cached_prompt_tokens,
                ..
            } = event
            {
                end = Some((timings, cached_prompt_tokens));
                break;
            }
        }
        self.finish("stop", end.as_ref().map(|(t, _)| &**t));
        end.map(|(_, cached)| cached)
    }

    fn finish(
        &mut self,
        reason: &str,
        timings: Option<&tokenmill_engine::sched::request::RequestTimings>,
    ) {
        self.finished = true;
        self.metrics.record(FinishedRequest {
            reason,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            timings,
        });
    }
}

/// Resolves once the server closes its replies; never, if it cannot say so any more (its state
/// is gone, and with it every reply).
async fn replies_closed(closing: &mut watch::Receiver<bool>) {
    if closing.wait_for(|closed| *closed).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Drop for ChoiceRun {
    fn drop(&mut self) {
        if !self.finished {
            self.handle.abort(self.id);
            self.finish("abort", None);
        }
    }
}
