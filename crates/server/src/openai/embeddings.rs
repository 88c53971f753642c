//! `POST /v1/embeddings`: text or token ids in, one pooled vector per input out, as OpenAI
//! documents it. Every input of a request is queued to the engine at once as a prefill-only
//! request ([`EmbedRequest`]), pooled as `--pooler-config` says (vLLM's flag: the last
//! token's final hidden state by default, or the mean of every position's, L2-normalized).
//!
//! A field this server does not model is refused by name, as on the generation endpoints;
//! `dimensions` is refused because a decoder model has no shortened (Matryoshka) embeddings,
//! unless it asks for the full width, which changes nothing.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokenmill_engine::sched::request::RequestTimings;
use tokenmill_engine::{EmbedRequest, EngineHandle, FinishReason, RequestEvent, SeqId};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

use crate::api::api_error::ApiError;
use crate::api::generation_request::{text_or_token_inputs, PromptInput};
use crate::metrics::{FinishedRequest, Metrics};
use crate::serving::app_state::AppState;
use crate::serving::json_body::JsonBody;
use crate::serving::off_runtime::off_runtime;

/// The body of `POST /v1/embeddings`: OpenAI's fields, and vLLM's `add_special_tokens`.
#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    pub input: Option<Value>,
    pub model: Option<String>,
    /// `float` (the default) or `base64` (the little-endian f32 bytes; what the `openai`
    /// Python package asks for unless told otherwise).
    pub encoding_format: Option<String>,
    pub dimensions: Option<Value>,
    /// For the caller's own records: changes nothing.
    pub user: Option<Value>,
    /// vLLM's: whether text is tokenized with the model's special tokens (BOS); default true.
    pub add_special_tokens: Option<bool>,
    /// Every other field, refused by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Fields accepted on `/v1/embeddings`; `docs/api.md` lists the same (a test holds the two
/// together).
pub const EMBEDDING_FIELDS: [&str; 6] = [
    "input",
    "model",
    "encoding_format",
    "dimensions",
    "user",
    "add_special_tokens",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EncodingFormat {
    Float,
    Base64,
}

pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<EmbeddingRequest>,
) -> Result<Json<Value>, ApiError> {
    state.check_model(body.model.as_deref())?;
    let format = check_fields(&body, state.hidden_size)?;
    let inputs = text_or_token_inputs("input", body.input.as_ref())?;
    // Before any tokenizing: the request's size is known from its shape alone.
    state.limits.check_inputs("input", inputs.len())?;
    let tokenizing = state.clone();
    let add_special_tokens = body.add_special_tokens.unwrap_or(true);
    let prompts = off_runtime(move || {
        inputs
            .into_iter()
            .map(|input| match input {
                PromptInput::Text(text) if text.is_empty() => Err(ApiError::bad_param(
                    "input",
                    "`input` holds an empty string, which has no embedding",
                )),
                PromptInput::Text(text) => tokenizing
                    .tokenizer()?
                    .encode(&text, add_special_tokens)
                    .map_err(|e| {
                        ApiError::bad_param("input", format!("could not be tokenized: {e}"))
                    }),
                PromptInput::Tokens(ids) => Ok(ids),
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    check_lengths(&state, &prompts)?;
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    let vectors = run(&state, prompts).await?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            json!({
                "object": "embedding",
                "index": index,
                "embedding": encode(vector, format),
            })
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": state.served_model_name,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    })))
}

/// Refuses what cannot be honoured, naming the field; returns the encoding asked for.
fn check_fields(body: &EmbeddingRequest, hidden_size: usize) -> Result<EncodingFormat, ApiError> {
    if let Some((name, _)) = body.other.iter().find(|(_, value)| !value.is_null()) {
        return Err(ApiError::bad_param(
            name.clone(),
            format!("unknown field `{name}`; docs/api.md lists the fields tokenmill accepts"),
        ));
    }
    match &body.dimensions {
        None | Some(Value::Null) => {}
        Some(d) if d.as_u64() == Some(hidden_size as u64) => {}
        Some(d) => {
            return Err(ApiError::bad_param(
                "dimensions",
                format!(
                    "`dimensions` {d} is not served: this model's embeddings are its hidden \
                     state, {hidden_size} wide, and a decoder model has no shortened \
                     (Matryoshka) ones"
                ),
            ))
        }
    }
    match body.encoding_format.as_deref() {
        None | Some("float") => Ok(EncodingFormat::Float),
        Some("base64") => Ok(EncodingFormat::Base64),
        Some(other) => Err(ApiError::bad_param(
            "encoding_format",
            format!("`encoding_format` must be `float` or `base64`, not `{other}`"),
        )),
    }
}

/// Each input fits the model's context; the first that does not is named by its index.
fn check_lengths(state: &AppState, prompts: &[Vec<u32>]) -> Result<(), ApiError> {
    let max = state.handle.limits().max_model_len;
    for (i, prompt) in prompts.iter().enumerate() {
        if prompt.is_empty() {
            return Err(ApiError::bad_param(
                "input",
                format!("input {i} holds no tokens, which have no embedding"),
            ));
        }
        if prompt.len() > max {
            return Err(ApiError::bad_param(
                "input",
                format!(
                    "input {i} has {} tokens, more than the model's context of {max} \
                     (max_model_len)",
                    prompt.len()
                ),
            ));
        }
    }
    Ok(())
}

fn encode(vector: &[f32], format: EncodingFormat) -> Value {
    match format {
        EncodingFormat::Float => json!(vector),
        EncodingFormat::Base64 => {
            let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }
}

/// Queues every prompt at once and waits for their vectors, in input order.
async fn run(state: &Arc<AppState>, prompts: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>, ApiError> {
    let pooling = state.pooler;
    let requests: Vec<EmbedRequest> = prompts
        .into_iter()
        .map(|prompt| EmbedRequest {
            prompt,
            pooling,
            priority: 0,
        })
        .collect();
    let handle = state.handle.clone();
    // `add_embeddings` blocks for up to one engine step while the engine thread assigns ids.
    let streams = tokio::task::spawn_blocking(move || handle.add_embeddings(requests))
        .await
        .map_err(|e| ApiError::internal(format!("queueing the request failed: {e}")))??;
    let mut runs: Vec<EmbeddingRun> = streams
        .into_iter()
        .map(|stream| EmbeddingRun {
            handle: state.handle.clone(),
            metrics: state.metrics.clone(),
            id: stream.id,
            events: stream.events,
            done: false,
        })
        .collect();
    let mut vectors = Vec::with_capacity(runs.len());
    for run in &mut runs {
        vectors.push(run.vector(state.closing.subscribe()).await?);
    }
    Ok(vectors)
}

/// One input in the engine. Dropped unfinished (the client left, or another input failed),
/// it aborts its request so its pages go back at the next step.
struct EmbeddingRun {
    handle: EngineHandle,
    metrics: Arc<Metrics>,
    id: SeqId,
    events: UnboundedReceiver<RequestEvent>,
    done: bool,
}

impl EmbeddingRun {
    /// Waits for the vector; a shutdown that closes replies first ends it with a 503.
    async fn vector(&mut self, mut closing: watch::Receiver<bool>) -> Result<Vec<f32>, ApiError> {
        let mut vector = None;
        loop {
            let event = tokio::select! {
                biased;
                _ = closing.wait_for(|closed| *closed) => {
                    return Err(ApiError::unavailable("the server is shutting down"));
                }
                event = self.events.recv() => event,
            };
            match event {
                Some(RequestEvent::Embedding { values }) => vector = Some(values),
                Some(RequestEvent::Finished {
                    reason,
                    prompt_tokens,
                    timings,
                    ..
                }) => {
                    self.done = true;
                    self.record(reason.as_str(), prompt_tokens, Some(&timings));
                    return match (reason, vector) {
                        (FinishReason::Stop, Some(vector)) => Ok(vector),
                        _ => Err(ApiError::engine_failed()),
                    };
                }
                Some(RequestEvent::Token { .. } | RequestEvent::PromptLogprobs { .. }) => {}
                // The engine stopped without reporting an end (shutdown).
                None => return Err(ApiError::unavailable("the engine has stopped")),
            }
        }
    }

    fn record(&self, reason: &str, prompt_tokens: usize, timings: Option<&RequestTimings>) {
        self.metrics.record(FinishedRequest {
            reason,
            prompt_tokens,
            completion_tokens: 0,
            timings,
        });
    }
}

impl Drop for EmbeddingRun {
    fn drop(&mut self) {
        if !self.done {
            self.handle.abort(self.id);
            self.record("abort", 0, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: Value) -> EmbeddingRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn base64_is_the_little_endian_f32_bytes() {
        let encoded = encode(&[1.0, -2.5], EncodingFormat::Base64);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap();
        assert_eq!(
            bytes,
            [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat()
        );
    }

    #[test]
    fn unknown_fields_other_widths_and_encodings_are_refused_by_name() {
        for (json, param) in [
            (json!({"input": "a", "truncate": 3}), "truncate"),
            (json!({"input": "a", "dimensions": 32}), "dimensions"),
            (
                json!({"input": "a", "encoding_format": "int8"}),
                "encoding_format",
            ),
        ] {
            let error = check_fields(&body(json.clone()), 64).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{json}");
        }
        let full_width = body(json!({"input": "a", "dimensions": 64, "user": "u"}));
        assert_eq!(
            check_fields(&full_width, 64).unwrap(),
            EncodingFormat::Float
        );
    }

    #[test]
    fn the_api_document_names_every_field_of_the_route() {
        let doc = include_str!("../../../../docs/api.md");
        let section = doc
            .split("## POST /v1/embeddings")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/api.md has a `## POST /v1/embeddings` section");
        for name in EMBEDDING_FIELDS {
            assert!(
                section.contains(&format!("| `{name}` |")),
                "docs/api.md's /v1/embeddings table misses `{name}`"
            );
        }
    }
}
