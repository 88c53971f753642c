//! `POST /v1/chat/completions`: a conversation rendered with the model's chat template.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Map, Value};

use crate::api_error::ApiError;
use crate::app_state::AppState;
use crate::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
use crate::field_policy::check_fields;
use crate::generation_request::{chat_messages, GenerationRequest};
use crate::json_body::JsonBody;
use crate::request_plan::{Endpoint, RequestPlan};
use crate::routes::generation::generate;
use crate::routes::off_runtime;
use crate::tool_call_parser::ToolCallParserKind;
use crate::tool_grammar::ToolGrammar;
use crate::tool_prompt::{template_tools, ToolPrompt};
use crate::tool_request::ToolRequest;

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody<GenerationRequest>,
) -> Result<Response, ApiError> {
    state.check_model(body.model.as_deref())?;
    check_fields(&body, Endpoint::Chat)?;
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
    let mut plan = RequestPlan::new(&body, Endpoint::Chat, vec![prompt], &state.plan_rules())?;
    plan.chat_echo = chat_echo;
    if let Some(tools) = &tools {
        plan_tool_calls(&mut plan, tools, state.tool_call_parser)?;
    }
    generate(state, plan, Endpoint::Chat).await
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

/// How the reply's calls are read: a forced choice is held to the Hermes grammar (so read as
/// Hermes), `auto` is read with the server's `--tool-call-parser`.
pub fn plan_tool_calls(
    plan: &mut RequestPlan,
    tools: &ToolRequest,
    server_parser: ToolCallParserKind,
) -> Result<(), ApiError> {
    plan.parallel_tool_calls = tools.parallel;
    match ToolGrammar::constraint(tools) {
        Some(grammar) => {
            if let Some(other) = &plan.structured {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    format!(
                        "`tool_choice` forces a tool call, which `{}` would contradict; send one",
                        other.param
                    ),
                ));
            }
            plan.structured = Some(grammar);
            plan.tool_call_parser = Some(ToolCallParserKind::Hermes);
            plan.tool_calls_only = true;
        }
        None => plan.tool_call_parser = Some(server_parser),
    }
    Ok(())
}

/// Everything a chat prompt is rendered from.
pub struct ChatPrompt<'a> {
    pub messages: &'a [ChatMessage],
    pub add_generation_prompt: bool,
    /// The prompt ends where the last message's content ends (`continue_final_message`):
    /// whatever the template writes after it (the end of the turn) is cut off.
    pub continue_final: bool,
    pub kwargs: &'a Map<String, Value>,
    /// The tools the model is offered (`None` also under `tool_choice: "none"`).
    pub tools: Option<&'a ToolRequest>,
}

impl ChatPrompt<'_> {
    /// Renders and tokenizes. The template already wrote any BOS it wants, so the tokenizer
    /// adds no special tokens of its own.
    pub fn token_ids(&self, state: &AppState) -> Result<Vec<u32>, ApiError> {
        let template = state.chat_template.as_ref().ok_or_else(|| {
            ApiError::bad_request(
                "this model has no chat template: start the server with --chat-template (a \
                 template file or the Jinja text itself), or send the prompt to /v1/completions",
            )
        })?;
        let text = self.render(template)?;
        state.tokenizer()?.encode(&text, false).map_err(|e| {
            ApiError::bad_param(
                "messages",
                format!("the conversation could not be tokenized: {e}"),
            )
        })
    }

    /// The prompt text. A template that reads `tools` gets them and the tool turns as they
    /// are; for any other, `ToolPrompt` writes them into the messages as text.
    pub fn render(&self, template: &ChatTemplate) -> Result<String, ApiError> {
        let offered = self.tools.map(|t| t.tools.as_slice()).unwrap_or_default();
        let rendered = if template.renders_tools() {
            let tools = (!offered.is_empty()).then(|| template_tools(offered));
            template.render_with_tools(
                self.messages,
                self.add_generation_prompt,
                self.kwargs,
                tools.as_deref(),
            )
        } else {
            let messages = ToolPrompt::new(offered).apply(self.messages.to_vec());
            template.render_with(&messages, self.add_generation_prompt, self.kwargs)
        };
        let rendered = rendered.map_err(|error| match error {
            ChatTemplateError::Raised(why) => ApiError::bad_param("messages", why),
            other => ApiError::internal(other.to_string()),
        })?;
        match self.messages.last() {
            Some(last) if self.continue_final => cut_after_final(rendered, &last.content),
            _ => Ok(rendered),
        }
    }
}

/// The rendered conversation up to the end of its final message, as Hugging Face's
/// `continue_final_message` cuts it (the content is looked for stripped of surrounding
/// whitespace, since templates often trim it).
fn cut_after_final(mut rendered: String, final_content: &str) -> Result<String, ApiError> {
    let content = final_content.trim();
    if content.is_empty() {
        return Ok(rendered);
    }
    let Some(start) = rendered.rfind(content) else {
        return Err(ApiError::bad_param(
            "continue_final_message",
            "the chat template does not write the final message's content as sent, so the \
             reply cannot continue it",
        ));
    };
    rendered.truncate(start + content.len());
    Ok(rendered)
}

/// Renders the conversation and tokenizes it. The template already wrote any BOS it wants,
/// so the tokenizer adds no special tokens of its own.
pub fn chat_prompt_ids(
    state: &AppState,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ApiError> {
    ChatPrompt {
        messages,
        add_generation_prompt,
        continue_final: false,
        kwargs: &Map::new(),
        tools: None,
    }
    .token_ids(state)
}
