//! The two routes: `POST /v1/messages` plans the translated request as the chat route
//! plans its own and runs it through the same engine runs; `POST /v1/messages/count_tokens`
//! renders the same prompt and counts it.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use super::errors::engine_failed_event;
use super::reply::{message_id, BlockStream, MessageReply};
use super::request::{ChatRequest, MessagesRequest};
use crate::api::api_error::ApiError;
use crate::generate::chat_prompt::{plan_tool_calls, ChatPrompt};
use crate::generate::choice_run::ChoiceRun;
use crate::generate::choice_total::ChoiceTotal;
use crate::generate::engine_runs::{start_runs, ENGINE_FAILED};
use crate::generate::field_policy::check_fields;
use crate::generate::request_plan::{Endpoint, PlanRules, RequestPlan};
use crate::serving::app_state::AppState;
use crate::serving::json_body::JsonBody;
use crate::serving::off_runtime::off_runtime;
use crate::tools::tool_request::ToolRequest;

/// Anthropic clients name Claude models (Claude Code asks for several): a `claude-*` name is
/// taken to mean the one model served; any other name must be the served one.
fn check_model(state: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        None => Err(ApiError::bad_param("model", "Field required")),
        Some(name) if name.starts_with("claude") => Ok(()),
        Some(name) => state.check_model(Some(name)),
    }
}

/// The prompt's token ids, rendered as the chat route renders a conversation.
async fn prompt_ids(
    state: &Arc<AppState>,
    chat: ChatRequest,
    tools: Option<ToolRequest>,
) -> Result<Vec<u32>, ApiError> {
    let rendering = state.clone();
    off_runtime(move || {
        ChatPrompt {
            messages: &chat.messages,
            add_generation_prompt: !chat.continue_final,
            continue_final: chat.continue_final,
            kwargs: &chat.kwargs,
            tools: tools.as_ref(),
        }
        .token_ids(&rendering)
    })
    .await
}

pub async fn messages(
    State(state): State<Arc<AppState>>,
    JsonBody(request): JsonBody<MessagesRequest>,
) -> Result<Response, ApiError> {
    check_model(&state, request.model.as_deref())?;
    let mut chat = request.to_chat(false)?;
    let mut body = std::mem::take(&mut chat.body);
    check_fields(&body, Endpoint::Chat)?;
    let tools = ToolRequest::from_request(&body)?;
    let prompt = prompt_ids(&state, chat, tools.clone()).await?;
    let input_tokens = prompt.len();
    // More than the context has room for runs to the context's end (Anthropic's newer
    // models do the same, and Claude Code asks for 32k-64k tokens whatever the model).
    let room = state
        .handle
        .limits()
        .max_model_len
        .saturating_sub(input_tokens);
    let length_reason = match body.max_tokens {
        Some(asked) if asked > room as i64 && room > 0 => {
            body.max_tokens = Some(room as i64);
            "model_context_window_exceeded"
        }
        _ => "max_tokens",
    };
    let mut plan = RequestPlan::new(&body, Endpoint::Chat, vec![prompt], &PlanRules::of(&state))?;
    if let Some(tools) = &tools {
        plan_tool_calls(&mut plan, tools, state.tool_call_parser)?;
    }
    let mut runs = start_runs(&state, &plan, Endpoint::Chat).await?;
    let run = runs
        .pop()
        .ok_or_else(|| ApiError::internal("a message request planned no run"))?;
    let reply = MessageReply {
        id: message_id(),
        model: state.served_model_name.clone(),
        input_tokens,
        length_reason,
    };
    if plan.stream {
        Ok(stream_reply(run, reply, BlockStream::new(length_reason)).into_response())
    } else {
        Ok(collect_reply(run, reply).await?.into_response())
    }
}

async fn collect_reply(mut run: ChoiceRun, reply: MessageReply) -> Result<Json<Value>, ApiError> {
    let mut total = ChoiceTotal::default();
    let mut stop_string = None;
    while let Some(delta) = run.next_delta().await {
        stop_string = delta.stop_string.clone().or(stop_string);
        total.absorb(delta);
    }
    if total.finish_reason == Some(ENGINE_FAILED) {
        return Err(ApiError::engine_failed());
    }
    Ok(Json(reply.full(&total, stop_string.as_deref())))
}

fn event(name: &'static str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// The SSE body. It owns the run, so a client that disconnects drops it, which aborts the
/// engine request.
fn stream_reply(
    run: ChoiceRun,
    reply: MessageReply,
    blocks: BlockStream,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let opening = vec![
        event("message_start", &reply.start()),
        event("ping", &json!({"type": "ping"})),
    ];
    let body = stream::unfold(Some((run, blocks)), |state| async move {
        let (mut run, mut blocks) = state?;
        let delta = run.next_delta().await?;
        if delta.finish_reason == Some(ENGINE_FAILED) {
            // Anthropic ends a failed stream with an `error` event.
            return Some((vec![event("error", &engine_failed_event())], None));
        }
        let events = blocks
            .events(&delta)
            .into_iter()
            .map(|(name, data)| event(name, &data))
            .collect();
        Some((events, Some((run, blocks))))
    });
    Sse::new(
        stream::iter(vec![opening])
            .chain(body)
            .flat_map(stream::iter)
            .map(Ok),
    )
}

pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    JsonBody(request): JsonBody<MessagesRequest>,
) -> Result<Json<Value>, ApiError> {
    check_model(&state, request.model.as_deref())?;
    let mut chat = request.to_chat(true)?;
    let body = std::mem::take(&mut chat.body);
    let tools = ToolRequest::from_request(&body)?;
    let prompt = prompt_ids(&state, chat, tools).await?;
    Ok(Json(json!({"input_tokens": prompt.len()})))
}
