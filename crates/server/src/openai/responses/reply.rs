//! A Responses reply: the `response` object around a run's output items, whole or as its
//! stream of typed events (`response.created` ... `response.completed`), and the finished
//! response handed to the store.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{json, Map, Value};

use crate::api::api_error::ApiError;
use crate::generate::choice_run::ChoiceRun;
use crate::generate::reply_id::unix_now;
use crate::openai::responses::output::{OutputEvent, OutputShaper};
use crate::openai::responses::request::ResponsesRequest;
use crate::openai::responses::store::{ResponseStore, StoredResponse};
use crate::serving::app_state::AppState;

/// The finish reason of a run whose engine step failed (as `engine_runs` names it).
const ENGINE_FAILED: &str = "error";

/// Answers with the run's response: streamed when `stream`, else whole.
pub async fn respond(run: ChoiceRun, reply: Reply, stream: bool) -> Result<Response, ApiError> {
    if stream {
        Ok(stream_reply(run, reply).into_response())
    } else {
        collect(run, reply).await.map(|r| Json(r).into_response())
    }
}

/// The fields of the response object that repeat the request (its settings).
pub fn skeleton(state: &AppState, body: &ResponsesRequest, store: bool) -> Map<String, Value> {
    let tool_choice = body.tool_choice.clone().unwrap_or_else(|| "auto".into());
    let format = body
        .text
        .as_ref()
        .and_then(|t| t.get("format"))
        .filter(|f| !f.is_null())
        .cloned()
        .unwrap_or_else(|| json!({"type": "text"}));
    let echoed = json!({
        "object": "response",
        "created_at": unix_now(),
        "model": state.served_model_name,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata.clone().unwrap_or_else(|| json!({})),
        "parallel_tool_calls": body.parallel_tool_calls.unwrap_or(true),
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": null, "summary": null},
        "store": store,
        "temperature": body.temperature,
        "text": {"format": format, "verbosity": "medium"},
        "tool_choice": tool_choice,
        "tools": body.tools.clone().unwrap_or_else(|| json!([])),
        "top_p": body.top_p,
        "truncation": "disabled",
        "user": body.other.get("user").cloned(),
        "error": null,
        "incomplete_details": null,
    });
    match echoed {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// What the reply is made of besides its output items.
pub struct Reply {
    pub id: String,
    /// The request's settings, echoed (see [`skeleton`]).
    pub skeleton: Map<String, Value>,
    pub input_tokens: usize,
    /// Where the finished response goes, with its conversation (`store: true`).
    pub store: Option<(Arc<ResponseStore>, Vec<Value>)>,
}

/// Where a run ended, as the response says it.
struct Ending {
    status: &'static str,
    incomplete_reason: Option<&'static str>,
}

fn ending(finish_reason: Option<&str>) -> Ending {
    match finish_reason {
        Some("length") => Ending {
            status: "incomplete",
            incomplete_reason: Some("max_output_tokens"),
        },
        // The server ended the reply at shutdown.
        Some("abort") => Ending {
            status: "incomplete",
            incomplete_reason: None,
        },
        _ => Ending {
            status: "completed",
            incomplete_reason: None,
        },
    }
}

impl Reply {
    /// The response object at some point of its life.
    fn object(&self, status: &str, output: &[Value], usage: Option<Value>) -> Value {
        let mut object = self.skeleton.clone();
        object.insert("id".into(), self.id.clone().into());
        object.insert("status".into(), status.into());
        object.insert("output".into(), output.to_vec().into());
        object.insert("usage".into(), usage.unwrap_or(Value::Null));
        Value::Object(object)
    }

    fn finished(&self, ending: &Ending, output: &[Value], tokens: &Tokens) -> Value {
        let usage = json!({
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": tokens.cached.unwrap_or(0)},
            "output_tokens": tokens.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + tokens.output,
        });
        let mut object = self.object(ending.status, output, Some(usage));
        if ending.status == "completed" {
            object["completed_at"] = unix_now().into();
        }
        if let Some(reason) = ending.incomplete_reason {
            object["incomplete_details"] = json!({ "reason": reason });
        }
        object
    }

    /// Keeps a finished response (when asked to), for `GET` and `previous_response_id`.
    fn keep(&mut self, response: &Value) {
        if let Some((store, conversation)) = self.store.take() {
            store.insert(
                self.id.clone(),
                StoredResponse {
                    response: response.clone(),
                    conversation,
                },
            );
        }
    }
}

#[derive(Debug, Default)]
struct Tokens {
    output: usize,
    cached: Option<usize>,
}

async fn collect(mut run: ChoiceRun, mut reply: Reply) -> Result<Value, ApiError> {
    let mut shaper = OutputShaper::default();
    let mut tokens = Tokens::default();
    let mut finish_reason = None;
    while let Some(delta) = run.next_delta().await {
        if delta.finish_reason == Some(ENGINE_FAILED) {
            return Err(ApiError::engine_failed());
        }
        tokens.output += delta.tokens.len();
        tokens.cached = delta.cached_prompt_tokens.or(tokens.cached);
        finish_reason = delta.finish_reason.or(finish_reason);
        shaper.push(&delta);
    }
    let ending = ending(finish_reason);
    shaper.finish(item_status(&ending));
    let response = reply.finished(&ending, shaper.items(), &tokens);
    reply.keep(&response);
    Ok(response)
}

fn item_status(ending: &Ending) -> &'static str {
    if ending.status == "completed" {
        "completed"
    } else {
        "incomplete"
    }
}

/// The state of a stream between events.
struct StreamState {
    run: ChoiceRun,
    reply: Reply,
    shaper: OutputShaper,
    tokens: Tokens,
    sequence: u64,
    /// `response.created` and `response.in_progress` are sent.
    opened: bool,
    closed: bool,
}

impl StreamState {
    fn events(&mut self, events: Vec<OutputEvent>) -> Vec<Event> {
        events
            .into_iter()
            .map(|(kind, mut body)| {
                body["type"] = kind.into();
                body["sequence_number"] = self.sequence.into();
                self.sequence += 1;
                Event::default().event(kind).data(body.to_string())
            })
            .collect()
    }
}

/// The SSE body: `response.created`, `response.in_progress`, the items' events, then
/// `response.completed` (or `response.incomplete`, or `response.failed` if the engine
/// failed). It owns the run, so a client that leaves aborts its engine request.
fn stream_reply(
    run: ChoiceRun,
    reply: Reply,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let state = StreamState {
        run,
        reply,
        shaper: OutputShaper::default(),
        tokens: Tokens::default(),
        sequence: 0,
        opened: false,
        closed: false,
    };
    Sse::new(
        stream::unfold(state, next_events)
            .flat_map(stream::iter)
            .map(Ok),
    )
}

async fn next_events(mut s: StreamState) -> Option<(Vec<Event>, StreamState)> {
    if s.closed {
        return None;
    }
    if !s.opened {
        s.opened = true;
        let response = s.reply.object("in_progress", &[], None);
        let events = s.events(vec![
            ("response.created", json!({ "response": response })),
            ("response.in_progress", json!({ "response": response })),
        ]);
        return Some((events, s));
    }
    let Some(delta) = s.run.next_delta().await else {
        // A run always ends with a finish reason; this is only a safety net.
        s.closed = true;
        return None;
    };
    if delta.finish_reason == Some(ENGINE_FAILED) {
        s.closed = true;
        let error = ApiError::engine_failed();
        let mut response = s.reply.object("failed", s.shaper.items(), None);
        response["error"] = json!({"code": "server_error", "message": error.message});
        let events = s.events(vec![("response.failed", json!({ "response": response }))]);
        return Some((events, s));
    }
    s.tokens.output += delta.tokens.len();
    s.tokens.cached = delta.cached_prompt_tokens.or(s.tokens.cached);
    let mut events = s.shaper.push(&delta);
    if delta.finish_reason.is_some() {
        s.closed = true;
        let ending = ending(delta.finish_reason);
        events.extend(s.shaper.finish(item_status(&ending)));
        let response = s.reply.finished(&ending, s.shaper.items(), &s.tokens);
        s.reply.keep(&response);
        let kind = if ending.status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        events.push((kind, json!({ "response": response })));
    }
    let events = s.events(events);
    Some((events, s))
}
