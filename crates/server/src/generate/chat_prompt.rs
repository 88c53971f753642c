//! `ChatPrompt`: a conversation rendered with the model's chat template (tools offered as
//! the template wants them) and tokenized, and how a plan reads the reply's tool calls:
//! the prompt side every protocol that speaks in turns shares.

use serde_json::{Map, Value};

use crate::api::api_error::ApiError;
use crate::generate::request_plan::RequestPlan;
use crate::serving::app_state::AppState;
use crate::text::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
use crate::tools::tool_call_parser::ToolCallParserKind;
use crate::tools::tool_grammar::ToolGrammar;
use crate::tools::tool_prompt::{template_tools, ToolPrompt};
use crate::tools::tool_request::ToolRequest;

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
