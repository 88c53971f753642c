//! `POST /v1/chat/completions`: a conversation rendered with the model's chat template.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Map, Value};

use crate::api_error::ApiError;
use crate::app_state::AppState;
use crate::chat_template::{ChatMessage, ChatTemplateError};
use crate::field_policy::check_fields;
use crate::generation_request::{chat_messages, GenerationRequest};
use crate::json_body::JsonBody;
use crate::request_plan::{Endpoint, RequestPlan};
use crate::routes::generation::generate;
use crate::routes::off_runtime;

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<GenerationRequest>,
) -> Result<Response, ApiError> {
    state.check_model(body.model.as_deref())?;
    check_fields(&body, Endpoint::Chat)?;
    let messages = chat_messages(body.messages.as_deref())?;
    state.limits.check(&body, 1)?;
    let rendering = state.clone();
    let add_generation_prompt = body.add_generation_prompt.unwrap_or(true);
    let kwargs = body.chat_template_kwargs.clone().unwrap_or_default();
    let prompt = off_runtime(move || {
        chat_prompt_ids_with(&rendering, &messages, add_generation_prompt, &kwargs)
    })
    .await?;
    let plan = RequestPlan::new(
        &body,
        Endpoint::Chat,
        vec![prompt],
        state.handle.limits(),
        &state.limits,
    )?;
    generate(state, plan, Endpoint::Chat).await
}

/// Renders the conversation and tokenizes it. The template already wrote any BOS it wants,
/// so the tokenizer adds no special tokens of its own.
pub fn chat_prompt_ids(
    state: &AppState,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ApiError> {
    chat_prompt_ids_with(state, messages, add_generation_prompt, &Map::new())
}

/// [`chat_prompt_ids`] with the request's `chat_template_kwargs`.
pub fn chat_prompt_ids_with(
    state: &AppState,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    kwargs: &Map<String, Value>,
) -> Result<Vec<u32>, ApiError> {
    let template = state.chat_template.as_ref().ok_or_else(|| {
        ApiError::bad_request("this model has no chat template; use /v1/completions")
    })?;
    let text = template
        .render_with(messages, add_generation_prompt, kwargs)
        .map_err(|error| match error {
            ChatTemplateError::Raised(why) => ApiError::bad_param("messages", why),
            other => ApiError::internal(other.to_string()),
        })?;
    state.tokenizer()?.encode(&text, false).map_err(|e| {
        ApiError::bad_param(
            "messages",
            format!("the conversation could not be tokenized: {e}"),
        )
    })
}
