//! What both OpenAI generation endpoints do once a request is planned: start its runs
//! (`engine_runs`), then stream the choices as SSE chunks or collect them into one reply.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::future::join_all;
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};

use crate::api::api_error::ApiError;
use crate::generate::choice_run::{ChoiceDelta, ChoiceRun};
use crate::generate::choice_total::ChoiceTotal;
use crate::generate::engine_runs::{reasoning, start_runs, ENGINE_FAILED};
use crate::generate::request_plan::{Endpoint, RequestPlan};
use crate::openai::reply_builder::{PromptReport, ReplyBuilder, Usage};
use crate::serving::app_state::AppState;
use crate::tools::reasoning_parser::ReasoningDelivery;

pub async fn generate(
    state: Arc<AppState>,
    plan: RequestPlan,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    let runs = start_runs(&state, &plan, endpoint).await?;
    let reply = ReplyBuilder::new(
        endpoint,
        state.served_model_name.clone(),
        state.tokenizer.clone(),
        plan.logprobs,
    )
    .with_prompts(PromptReport {
        echoed: plan.echoed.clone(),
        prompt_logprobs: plan.prompt_logprobs,
        choices_per_prompt: plan.n,
    })
    .with_tokens_as_ids(plan.tokens_as_ids)
    .with_chat_echo(plan.chat_echo.clone())
    .with_reasoning(
        reasoning(&state, &plan, endpoint).is_some_and(|(_, d)| d != ReasoningDelivery::Dropped),
    );
    let usage = UsagePlan {
        prompt_tokens: plan.prompt_lens.iter().sum(),
        cached_details: state.prompt_tokens_details,
        choices_per_prompt: plan.n.max(1),
    };
    if plan.stream {
        Ok(stream_reply(runs, reply, usage, plan.include_usage).into_response())
    } else {
        Ok(collect_reply(runs, reply, usage).await?.into_response())
    }
}

/// What a reply's `usage` is made of besides the tokens generated.
#[derive(Debug, Clone, Copy)]
struct UsagePlan {
    prompt_tokens: usize,
    /// `--enable-prompt-tokens-details`: say how many prompt tokens were cached.
    cached_details: bool,
    choices_per_prompt: usize,
}

impl UsagePlan {
    /// The usage of a reply whose choices (prompt by prompt, `choices_per_prompt` each)
    /// found `cached` prompt tokens each. A prompt counts once, as in `prompt_tokens`: its
    /// first choice's cached tokens stand for it.
    fn usage(&self, completion_tokens: usize, cached: &[Option<usize>]) -> Usage {
        let cached_tokens = self.cached_details.then(|| {
            cached
                .iter()
                .step_by(self.choices_per_prompt)
                .map(|c| c.unwrap_or(0))
                .sum()
        });
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens,
            cached_tokens,
        }
    }
}

/// The whole reply, or a 500 if the engine failed while computing any choice.
async fn collect_reply(
    runs: Vec<ChoiceRun>,
    reply: ReplyBuilder,
    usage: UsagePlan,
) -> Result<Json<serde_json::Value>, ApiError> {
    let totals = join_all(runs.into_iter().map(collect_choice)).await;
    if totals
        .iter()
        .any(|t| t.finish_reason == Some(ENGINE_FAILED))
    {
        return Err(ApiError::engine_failed());
    }
    let cached: Vec<Option<usize>> = totals.iter().map(|t| t.cached_prompt_tokens).collect();
    let usage = usage.usage(totals.iter().map(|t| t.tokens.len()).sum(), &cached);
    Ok(Json(reply.full(&totals, usage)))
}

async fn collect_choice(mut run: ChoiceRun) -> ChoiceTotal {
    let mut total = ChoiceTotal::default();
    while let Some(delta) = run.next_delta().await {
        total.absorb(delta);
    }
    total
}

/// Where a stream is: sending choice deltas, then the optional usage chunk, then `[DONE]`.
enum Phase {
    Choices,
    UsageSent,
    Closed,
}
struct StreamState {
    merged: SelectAll<BoxStream<'static, (usize, ChoiceDelta)>>,
    reply: ReplyBuilder,
    /// Per choice: bytes of text streamed so far (`None` until its first chunk).
    streamed: Vec<Option<usize>>,
    usage: UsagePlan,
    completion_tokens: usize,
    /// Per choice: prompt tokens found cached, once it has ended.
    cached: Vec<Option<usize>>,
    include_usage: bool,
    phase: Phase,
}

/// The SSE body. It owns the runs, so a client that disconnects drops them, which aborts
/// their engine requests.
fn stream_reply(
    runs: Vec<ChoiceRun>,
    reply: ReplyBuilder,
    usage: UsagePlan,
    include_usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let choices = runs.len();
    let merged = stream::select_all(runs.into_iter().enumerate().map(|(index, run)| {
        stream::unfold(run, move |mut run| async move {
            let delta = run.next_delta().await?;
            Some(((index, delta), run))
        })
        .boxed()
    }));
    let state = StreamState {
        merged,
        reply,
        streamed: vec![None; choices],
        usage,
        completion_tokens: 0,
        cached: vec![None; choices],
        include_usage,
        phase: Phase::Choices,
    };
    Sse::new(
        stream::unfold(state, next_events)
            .flat_map(stream::iter)
            .map(Ok),
    )
}

/// The events of the next step of the stream: one per chunk (a delta that completes tool
/// calls takes several chunks, as OpenAI streams them).
async fn next_events(mut s: StreamState) -> Option<(Vec<Event>, StreamState)> {
    let data: Vec<String> = match s.phase {
        Phase::Choices => match s.merged.next().await {
            // The stream ends with an error object, then `[DONE]`, as vLLM ends it.
            Some((_, delta)) if delta.finish_reason == Some(ENGINE_FAILED) => {
                s.phase = Phase::UsageSent;
                vec![ApiError::engine_failed().body().to_string()]
            }
            Some((index, delta)) => {
                s.completion_tokens += delta.tokens.len();
                s.cached[index] = delta.cached_prompt_tokens.or(s.cached[index]);
                let offset = s.streamed[index];
                let chunks = s
                    .reply
                    .chunks(index, &delta, offset.is_none(), offset.unwrap_or(0));
                // An echoed prompt opens the first chunk, so later offsets count it.
                let echoed = if offset.is_none() {
                    s.reply.echoed_len(index)
                } else {
                    0
                };
                s.streamed[index] = Some(offset.unwrap_or(0) + echoed + delta.text.len());
                chunks.iter().map(ToString::to_string).collect()
            }
            None if s.include_usage => {
                s.phase = Phase::UsageSent;
                let usage = s.usage.usage(s.completion_tokens, &s.cached);
                vec![s.reply.usage_chunk(usage).to_string()]
            }
            None => {
                s.phase = Phase::Closed;
                vec!["[DONE]".to_owned()]
            }
        },
        Phase::UsageSent => {
            s.phase = Phase::Closed;
            vec!["[DONE]".to_owned()]
        }
        Phase::Closed => return None,
    };
    let events = data
        .into_iter()
        .map(|data| Event::default().data(data))
        .collect();
    Some((events, s))
}
