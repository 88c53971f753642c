//! `POST /tokenize` and `POST /detokenize`: the server's tokenizer, for clients (the bench)
//! that need exact token counts.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::api_error::ApiError;
use crate::api::generation_request::{chat_messages, MessageIn};
use crate::generate::chat_prompt::chat_prompt_ids;
use crate::serving::app_state::AppState;
use crate::serving::json_body::JsonBody;
use crate::serving::off_runtime::off_runtime;

#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    model: Option<String>,
    prompt: Option<String>,
    messages: Option<Vec<MessageIn>>,
    add_special_tokens: Option<bool>,
    add_generation_prompt: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    model: Option<String>,
    tokens: Vec<u32>,
}

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<TokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    state.check_model(body.model.as_deref())?;
    let working = state.clone();
    let tokens = match (body.prompt, body.messages) {
        (Some(prompt), None) => {
            let add_special_tokens = body.add_special_tokens.unwrap_or(true);
            off_runtime(move || {
                working
                    .tokenizer()?
                    .encode(&prompt, add_special_tokens)
                    .map_err(|e| ApiError::bad_param("prompt", e.to_string()))
            })
            .await?
        }
        (None, Some(messages)) => {
            let messages = chat_messages(Some(&messages))?;
            let add_generation_prompt = body.add_generation_prompt.unwrap_or(true);
            off_runtime(move || chat_prompt_ids(&working, &messages, add_generation_prompt)).await?
        }
        _ => {
            return Err(ApiError::bad_request(
                "send exactly one of `prompt` (a string) or `messages`",
            ))
        }
    };
    Ok(Json(json!({
        "tokens": tokens,
        "count": tokens.len(),
        "max_model_len": state.handle.limits().max_model_len,
    })))
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<DetokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    state.check_model(body.model.as_deref())?;
    let vocab = state.handle.limits().vocab_size;
    if let Some(bad) = body.tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::bad_param(
            "tokens",
            format!("token id {bad} is outside the vocabulary (size {vocab})"),
        ));
    }
    let prompt = state
        .tokenizer()?
        .decode(&body.tokens, false)
        .map_err(|e| ApiError::bad_param("tokens", e.to_string()))?;
    Ok(Json(json!({ "prompt": prompt })))
}
