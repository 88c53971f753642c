//! `POST /v1/completions`: text (or token-id) prompts in, completions out.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use crate::api_error::ApiError;
use crate::app_state::AppState;
use crate::generation_request::{prompt_inputs, GenerationRequest, PromptInput};
use crate::json_body::JsonBody;
use crate::request_plan::{Endpoint, RequestPlan};
use crate::routes::generation::generate;
use crate::routes::off_runtime;

pub async fn completions(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<GenerationRequest>,
) -> Result<Response, ApiError> {
    state.check_model(body.model.as_deref())?;
    let inputs = prompt_inputs(body.prompt.as_ref())?;
    // Before any tokenizing: the request's size is known from its shape alone.
    state.limits.check(&body, inputs.len())?;
    if state.tokenizer.is_none() && body.stop.is_some() {
        return Err(ApiError::bad_param(
            "stop",
            "stop strings need a tokenizer, and this model has none",
        ));
    }
    let tokenizing = state.clone();
    let prompts = off_runtime(move || {
        inputs
            .into_iter()
            .map(|input| match input {
                PromptInput::Text(text) => encode(&tokenizing, &text),
                PromptInput::Tokens(ids) => Ok(ids),
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    let plan = RequestPlan::new(
        &body,
        Endpoint::Completions,
        prompts,
        state.handle.limits(),
        &state.limits,
    )?;
    generate(state, plan, Endpoint::Completions).await
}

fn encode(state: &AppState, text: &str) -> Result<Vec<u32>, ApiError> {
    state.tokenizer()?.encode(text, true).map_err(|e| {
        ApiError::bad_param("prompt", format!("the prompt could not be tokenized: {e}"))
    })
}
