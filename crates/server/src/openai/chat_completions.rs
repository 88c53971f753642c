//! `POST /v1/chat/completions`: a conversation rendered with the model's chat template.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use crate::api::api_error::ApiError;
use crate::api::generation_request::{chat_messages, GenerationRequest};
use crate::generate::chat_prompt::{plan_tool_calls, ChatPrompt};
use crate::generate::field_policy::check_fields;
use crate::generate::request_plan::{Endpoint, PlanRules, RequestPlan};
use crate::openai::generation::generate;
use crate::serving::app_state::AppState;
use crate::serving::json_body::JsonBody;
use crate::serving::off_runtime::off_runtime;
use crate::text::chat_template::ChatMessage;
use crate::tools::tool_request::ToolRequest;

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<GenerationRequest>,
) -> Result<Response, ApiError> {
    state.check_model(body.model.as_deref())?;
    check_fields(&body, Endpoint::Chat)?;
    let plan = plan_chat(state.clone(), body).await?;
    generate(state, plan, Endpoint::Chat).await
}

/// A checked chat request, its conversation rendered and tokenized: the plan every protocol
/// that speaks in turns (chat completions, Responses) runs. Fields are checked by the caller.
pub async fn plan_chat(
    state: Arc<AppState>,
    body: GenerationRequest,
) -> Result<RequestPlan, ApiError> {
    let messages = chat_messages(body.messages.as_deref())?;
    let tools = ToolRequest::from_request(&body)?;
    state.limits.check(&body, 1)?;
    let rendering = state.clone();
    let continue_final = continuation(&body, &messages)?;
    // vLLM's default is a generation prompt; a continued message has none (SGLang's router
    // sends `continue_final_message` without `add_generation_prompt`).
    let add_generation_prompt = body.add_generation_prompt.unwrap_or(!continue_final);
    let kwargs = body.chat_template_kwargs.clone().unwrap_or_default();
    let chat_echo = echoed_message(&body, &messages, add_generation_prompt);
    let offered = tools.clone();
    let prompt = off_runtime(move || {
        let prompt = ChatPrompt {
            messages: &messages,
            add_generation_prompt,
            continue_final,
            kwargs: &kwargs,
            tools: offered.as_ref(),
        };
        prompt.token_ids(&rendering)
    })
    .await?;
    let mut plan = RequestPlan::new(&body, Endpoint::Chat, vec![prompt], &PlanRules::of(&state))?;
    plan.chat_echo = chat_echo;
    if let Some(tools) = &tools {
        plan_tool_calls(&mut plan, tools, state.tool_call_parser)?;
    }
    Ok(plan)
}

/// Whether the reply continues the last message (`continue_final_message`), as vLLM allows
/// it: the last message must be the assistant's, and there is no generation prompt after it.
fn continuation(body: &GenerationRequest, messages: &[ChatMessage]) -> Result<bool, ApiError> {
    if body.continue_final_message != Some(true) {
        return Ok(false);
    }
    if body.add_generation_prompt == Some(true) {
        return Err(ApiError::bad_param(
            "continue_final_message",
            "`continue_final_message` and `add_generation_prompt` cannot both be true: a \
             continued message has no generation prompt after it",
        ));
    }
    match messages.last() {
        Some(last) if last.role == "assistant" => Ok(true),
        _ => Err(ApiError::bad_param(
            "continue_final_message",
            "`continue_final_message` needs the last message to be an assistant message",
        )),
    }
}

/// What vLLM's chat `echo` repeats: the last message's content, when that message has the
/// reply's role — the assistant's under a generation prompt, else the last speaker's (so a
/// continued assistant message is echoed whole, and a new turn after a user's is not).
fn echoed_message(
    body: &GenerationRequest,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Option<String> {
    let last = messages.last().filter(|_| body.echo == Some(true))?;
    let role = if add_generation_prompt {
        "assistant"
    } else {
        last.role.as_str()
    };
    (last.role == role).then(|| last.content.clone())
}
