//! `POST /v1/completions`: text (or token-id) prompts in, completions out.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use crate::api::api_error::ApiError;
use crate::api::generation_request::{prompt_inputs, GenerationRequest, PromptInput};
use crate::generate::field_policy::check_fields;
use crate::generate::request_plan::{EchoedPrompt, Endpoint, PlanRules, RequestPlan};
use crate::openai::generation::generate;
use crate::serving::app_state::AppState;
use crate::serving::json_body::JsonBody;
use crate::serving::off_runtime::off_runtime;

pub async fn completions(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<GenerationRequest>,
) -> Result<Response, ApiError> {
    state.check_model(body.model.as_deref())?;
    check_fields(&body, Endpoint::Completions)?;
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
    let echo = body.echo == Some(true);
    let prompts = off_runtime(move || {
        inputs
            .into_iter()
            .map(|input| match input {
                PromptInput::Text(text) => Ok((encode(&tokenizing, &text)?, text)),
                PromptInput::Tokens(ids) if echo => {
                    let text = decode(&tokenizing, &ids);
                    Ok((ids, text))
                }
                PromptInput::Tokens(ids) => Ok((ids, String::new())),
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    let (ids, texts): (Vec<_>, Vec<_>) = prompts.into_iter().unzip();
    let mut plan = RequestPlan::new(&body, Endpoint::Completions, ids, &PlanRules::of(&state))?;
    if plan.echo {
        plan.echoed = texts
            .into_iter()
            .zip(plan.requests.iter().step_by(plan.n))
            .map(|(text, request)| EchoedPrompt {
                text,
                first_token: request.prompt[0],
            })
            .collect();
    }
    generate(state, plan, Endpoint::Completions).await
}

/// A token-id prompt as text, for `echo`; a model without a tokenizer shows the ids.
fn decode(state: &AppState, ids: &[u32]) -> String {
    state
        .tokenizer
        .as_ref()
        .and_then(|t| t.decode(ids, false).ok())
        .unwrap_or_else(|| format!("{ids:?}"))
}

fn encode(state: &AppState, text: &str) -> Result<Vec<u32>, ApiError> {
    state.tokenizer()?.encode(text, true).map_err(|e| {
        ApiError::bad_param("prompt", format!("the prompt could not be tokenized: {e}"))
    })
}
