//! The body of `/v1/messages` (and `/v1/messages/count_tokens`), and its translation into
//! what the chat route works from: the conversation as `ChatMessage`s for the chat template,
//! and a `GenerationRequest` carrying the sampling fields, stop strings, tools (in OpenAI's
//! spelling, so `ToolRequest` checks them) and output constraint.
//!
//! Content blocks are walked by hand, so a refusal names the exact block
//! (`messages.1.content.0.type`), as Anthropic's own errors do.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api::api_error::ApiError;
use crate::api::generation_request::GenerationRequest;
use crate::text::chat_template::ChatMessage;

/// The fields the request type models, each honoured (or, for `metadata`, accepted as
/// bookkeeping that changes nothing); docs/api.md describes each.
pub const MODELLED_FIELDS: [&str; 15] = [
    "model",
    "max_tokens",
    "messages",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "output_format",
];

#[derive(Debug, Default, Deserialize)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub messages: Option<Value>,
    pub system: Option<Value>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    /// `user_id` for the caller's own records: read by no one.
    #[allow(dead_code)]
    pub metadata: Option<Value>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub thinking: Option<Value>,
    /// `format` (a JSON schema the reply must match) and `effort` (no effect here).
    pub output_config: Option<Value>,
    /// The structured-outputs beta's spelling of `output_config.format`.
    pub output_format: Option<Value>,
    /// Every other field, for `fields::check_fields`.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// What `/v1/messages` asks for, in the chat route's terms.
pub struct ChatRequest {
    pub body: GenerationRequest,
    pub messages: Vec<ChatMessage>,
    /// The last message is the assistant's: the reply continues it (Anthropic's prefill).
    pub continue_final: bool,
    pub kwargs: Map<String, Value>,
}

impl MessagesRequest {
    /// Translates the request; `count_only` (count_tokens) does not need `max_tokens`.
    pub fn to_chat(&self, count_only: bool) -> Result<ChatRequest, ApiError> {
        super::fields::check_fields(&self.other)?;
        let mut body = GenerationRequest::default();
        if !count_only {
            let max_tokens = self
                .max_tokens
                .ok_or_else(|| ApiError::bad_param("max_tokens", "Field required"))?;
            body.max_tokens = Some(max_tokens);
        }
        body.stream = self.stream;
        body.temperature = self.temperature;
        body.top_p = self.top_p;
        body.top_k = self.top_k;
        if let Some(stops) = &self.stop_sequences {
            body.stop = Some(json!(stops));
        }
        let (tools, tool_choice, parallel) = tools(self.tools.as_ref(), self.tool_choice.as_ref())?;
        body.tools = tools;
        body.tool_choice = tool_choice;
        body.parallel_tool_calls = parallel;
        body.response_format =
            output_format(self.output_config.as_ref(), self.output_format.as_ref())?;
        let mut kwargs = Map::new();
        if let Some(enabled) = thinking(self.thinking.as_ref())? {
            // The variable Qwen3-style templates read to open or skip the think block.
            kwargs.insert("enable_thinking".into(), enabled.into());
        }
        let mut messages = system_message(self.system.as_ref())?;
        let (turns, continue_final) = turns(self.messages.as_ref())?;
        messages.extend(turns);
        Ok(ChatRequest {
            body,
            messages,
            continue_final,
            kwargs,
        })
    }
}

fn bad(param: impl Into<String>, why: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, why)
}

/// Refuses keys a block (or tool) does not have, so none is dropped unread.
fn only_keys(object: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), ApiError> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(bad(
            format!("{at}.{key}"),
            format!("`{key}` is not supported here; docs/api.md lists the fields of /v1/messages"),
        )),
        None => Ok(()),
    }
}

/// `system`: a string, or a list of text blocks (joined by blank lines).
fn system_message(system: Option<&Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let text = match system {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(i, block)| text_block(block, &format!("system.{i}")))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n\n"),
        Some(_) => {
            return Err(bad(
                "system",
                "`system` must be a string or a list of text blocks",
            ))
        }
    };
    Ok(if text.is_empty() {
        Vec::new()
    } else {
        vec![ChatMessage::new("system", text)]
    })
}

/// The text of a `{"type": "text"}` block; any other block is refused with the reason.
fn text_block(block: &Value, at: &str) -> Result<String, ApiError> {
    let object = block
        .as_object()
        .ok_or_else(|| bad(at, "each content block must be an object with a `type`"))?;
    match object.get("type").and_then(Value::as_str) {
        Some("text") => {
            only_keys(object, &["type", "text", "cache_control", "citations"], at)?;
            object
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| bad(format!("{at}.text"), "a text block needs a string `text`"))
        }
        Some(other) => Err(unsupported_block(other, at)),
        None => Err(bad(
            format!("{at}.type"),
            "each content block needs a `type`",
        )),
    }
}

fn unsupported_block(kind: &str, at: &str) -> ApiError {
    let why = match kind {
        "image" | "document" | "search_result" | "container_upload" => format!(
            "content blocks of type `{kind}` are not supported: this server's model reads text only"
        ),
        "server_tool_use"
        | "web_search_tool_result"
        | "web_fetch_tool_result"
        | "code_execution_tool_result"
        | "mcp_tool_use"
        | "mcp_tool_result" => {
            format!("`{kind}` blocks belong to tools Anthropic's servers run; tokenmill runs none")
        }
        _ => format!("content blocks of type `{kind}` are not supported here"),
    };
    bad(format!("{at}.type"), why)
}

/// The conversation, and whether its last turn is an assistant's to continue.
fn turns(messages: Option<&Value>) -> Result<(Vec<ChatMessage>, bool), ApiError> {
    let list = match messages {
        None | Some(Value::Null) => return Err(bad("messages", "Field required")),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(bad("messages", "`messages` must be a list of messages")),
    };
    if list.is_empty() {
        return Err(bad("messages", "`messages` must hold at least one message"));
    }
    let mut turns = Vec::new();
    let mut continue_final = false;
    for (i, message) in list.iter().enumerate() {
        let at = format!("messages.{i}");
        let object = message.as_object().ok_or_else(|| {
            bad(
                &at,
                "each message must be an object with `role` and `content`",
            )
        })?;
        only_keys(object, &["role", "content"], &at)?;
        let blocks = content_blocks(object.get("content"), &format!("{at}.content"))?;
        match object.get("role").and_then(Value::as_str) {
            Some("user") => turns.extend(user_turns(&blocks, &at)?),
            Some("assistant") => {
                let turn = assistant_turn(&blocks, &at)?;
                continue_final = i + 1 == list.len() && turn.tool_calls.is_none();
                turns.push(turn);
            }
            // Claude Code sends system messages between turns; chat templates take a system
            // turn only first, so its text joins the user's words around it (below).
            Some("system") => {
                let text = blocks
                    .iter()
                    .enumerate()
                    .map(|(j, block)| text_block(block, &format!("{at}.content.{j}")))
                    .collect::<Result<Vec<_>, _>>()?
                    .join("\n");
                turns.push(ChatMessage::new("user", text));
            }
            _ => {
                return Err(bad(
                    format!("{at}.role"),
                    "`role` must be `user`, `assistant` or `system`",
                ))
            }
        }
    }
    Ok((merge_user_turns(turns), continue_final))
}

/// Joins consecutive user turns (a system message's text and the user's words around it)
/// into one, since templates expect user and assistant turns to alternate.
fn merge_user_turns(turns: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut merged: Vec<ChatMessage> = Vec::with_capacity(turns.len());
    for turn in turns {
        match merged.last_mut() {
            Some(last) if last.role == "user" && turn.role == "user" => {
                if !turn.content.is_empty() {
                    if !last.content.is_empty() {
                        last.content.push_str("\n\n");
                    }
                    last.content.push_str(&turn.content);
                }
            }
            _ => merged.push(turn),
        }
    }
    merged
}

/// `content` as blocks: a string is one text block.
fn content_blocks(content: Option<&Value>, at: &str) -> Result<Vec<Value>, ApiError> {
    match content {
        Some(Value::String(text)) => Ok(vec![json!({"type": "text", "text": text})]),
        Some(Value::Array(blocks)) => Ok(blocks.clone()),
        None | Some(Value::Null) => Err(bad(at, "Field required")),
        Some(_) => Err(bad(
            at,
            "`content` must be a string or a list of content blocks",
        )),
    }
}

fn block_type<'a>(
    block: &'a Value,
    at: &str,
) -> Result<(&'a Map<String, Value>, &'a str), ApiError> {
    let object = block
        .as_object()
        .ok_or_else(|| bad(at, "each content block must be an object with a `type`"))?;
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{at}.type"), "each content block needs a `type`"))?;
    Ok((object, kind))
}

/// A user turn: its `tool_result` blocks become `tool` turns (which templates expect right
/// after the assistant's calls), then its text becomes one user turn.
fn user_turns(blocks: &[Value], at: &str) -> Result<Vec<ChatMessage>, ApiError> {
    let mut turns = Vec::new();
    let mut texts = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        let (object, kind) = block_type(block, &at)?;
        match kind {
            "text" => texts.push(text_block(block, &at)?),
            "tool_result" => {
                only_keys(
                    object,
                    &[
                        "type",
                        "tool_use_id",
                        "content",
                        "is_error",
                        "cache_control",
                    ],
                    &at,
                )?;
                let id = object
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{at}.tool_use_id"), "Field required"))?;
                let mut text = match object.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .enumerate()
                        .map(|(k, part)| text_block(part, &format!("{at}.content.{k}")))
                        .collect::<Result<Vec<_>, _>>()?
                        .join("\n"),
                    Some(_) => {
                        return Err(bad(
                            format!("{at}.content"),
                            "`content` must be a string or a list of text blocks",
                        ))
                    }
                };
                // The model is told the call failed, in the words it reads.
                if object.get("is_error") == Some(&Value::Bool(true)) {
                    text = format!("Error: {text}");
                }
                let mut turn = ChatMessage::new("tool", text);
                turn.tool_call_id = Some(id.to_owned());
                turns.push(turn);
            }
            "tool_use" | "thinking" | "redacted_thinking" => {
                return Err(bad(
                    format!("{at}.type"),
                    format!("`{kind}` blocks belong in assistant messages"),
                ))
            }
            other => return Err(unsupported_block(other, &at)),
        }
    }
    if !texts.is_empty() || turns.is_empty() {
        turns.push(ChatMessage::new("user", texts.join("\n")));
    }
    Ok(turns)
}

/// An assistant turn: its text and its calls (`arguments` as the object templates write
/// with `tojson`). Thinking blocks are left out of the prompt, as Anthropic leaves earlier
/// turns' thinking out of the model's context.
fn assistant_turn(blocks: &[Value], at: &str) -> Result<ChatMessage, ApiError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        let (object, kind) = block_type(block, &at)?;
        match kind {
            "text" => texts.push(text_block(block, &at)?),
            "tool_use" => {
                only_keys(
                    object,
                    &["type", "id", "name", "input", "cache_control", "caller"],
                    &at,
                )?;
                let name = object
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{at}.name"), "Field required"))?;
                let id = object.get("id").and_then(Value::as_str).unwrap_or_default();
                let input = object.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": input},
                }));
            }
            "thinking" => only_keys(object, &["type", "thinking", "signature"], &at)?,
            "redacted_thinking" => only_keys(object, &["type", "data"], &at)?,
            "tool_result" => {
                return Err(bad(
                    format!("{at}.type"),
                    "`tool_result` blocks belong in user messages",
                ))
            }
            other => return Err(unsupported_block(other, &at)),
        }
    }
    let mut turn = ChatMessage::new("assistant", texts.join(""));
    if !calls.is_empty() {
        turn.tool_calls = Some(calls);
    }
    Ok(turn)
}

/// `tools`, `tool_choice` and `parallel_tool_calls` as the chat body spells them.
type ChatToolFields = (Option<Value>, Option<Value>, Option<bool>);

/// `tools` and `tool_choice` in OpenAI's spelling (for `ToolRequest`), and whether parallel
/// calls are allowed (`disable_parallel_tool_use`).
fn tools(tools: Option<&Value>, choice: Option<&Value>) -> Result<ChatToolFields, ApiError> {
    let tools = match tools {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => Some(
            list.iter()
                .enumerate()
                .map(|(i, tool)| tool_function(tool, &format!("tools.{i}")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(bad("tools", "`tools` must be a list of tools")),
    };
    let (choice, parallel) = match choice {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(object)) => {
            only_keys(
                object,
                &["type", "name", "disable_parallel_tool_use"],
                "tool_choice",
            )?;
            let parallel = match object.get("disable_parallel_tool_use") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(disabled)) => Some(!disabled),
                Some(_) => {
                    return Err(bad(
                        "tool_choice.disable_parallel_tool_use",
                        "`disable_parallel_tool_use` must be true or false",
                    ))
                }
            };
            let choice = match object.get("type").and_then(Value::as_str) {
                Some("auto") => json!("auto"),
                Some("any") => json!("required"),
                Some("none") => json!("none"),
                Some("tool") => {
                    let name = object.get("name").and_then(Value::as_str).ok_or_else(|| {
                        bad(
                            "tool_choice.name",
                            "a `tool` choice needs the tool's `name`",
                        )
                    })?;
                    json!({"type": "function", "function": {"name": name}})
                }
                _ => {
                    return Err(bad(
                        "tool_choice.type",
                        "`tool_choice.type` must be `auto`, `any`, `tool` or `none`",
                    ))
                }
            };
            (Some(choice), parallel)
        }
        Some(_) => {
            return Err(bad(
                "tool_choice",
                "`tool_choice` must be an object such as {\"type\": \"auto\"}",
            ))
        }
    };
    Ok((tools.map(Value::Array), choice, parallel))
}

/// One client tool, as an OpenAI function tool. Server tools (`web_search_...`, `bash_...`)
/// run on Anthropic's side and are refused.
fn tool_function(tool: &Value, at: &str) -> Result<Value, ApiError> {
    let object = tool
        .as_object()
        .ok_or_else(|| bad(at, "each tool must be an object"))?;
    match object.get("type").and_then(Value::as_str) {
        None | Some("custom") => {}
        Some(other) => {
            return Err(bad(
                format!("{at}.type"),
                format!(
                    "`{other}` is a tool Anthropic's servers run; tokenmill offers only client \
                     tools (a `name`, `description` and `input_schema`)"
                ),
            ))
        }
    }
    // `strict` (inputs that follow the schema) and eager input streaming change nothing:
    // a forced call is held to its schema by grammar, and inputs stream whole either way.
    only_keys(
        object,
        &[
            "type",
            "name",
            "description",
            "input_schema",
            "cache_control",
            "strict",
            "eager_input_streaming",
        ],
        at,
    )?;
    let mut function = Map::new();
    function.insert(
        "name".into(),
        object.get("name").cloned().unwrap_or(Value::Null),
    );
    if let Some(description) = object.get("description") {
        function.insert("description".into(), description.clone());
    }
    let schema = object
        .get("input_schema")
        .ok_or_else(|| bad(format!("{at}.input_schema"), "Field required"))?;
    function.insert("parameters".into(), schema.clone());
    Ok(json!({"type": "function", "function": function}))
}

/// `thinking`: `enabled` / `adaptive` turn the template's thinking on, `disabled` off;
/// `budget_tokens` is accepted (the reply is bounded by `max_tokens` as a whole).
fn thinking(value: Option<&Value>) -> Result<Option<bool>, ApiError> {
    let object = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(object)) => object,
        Some(_) => {
            return Err(bad(
                "thinking",
                "`thinking` must be an object with a `type`",
            ))
        }
    };
    only_keys(object, &["type", "budget_tokens", "display"], "thinking")?;
    match object.get("type").and_then(Value::as_str) {
        Some("enabled" | "adaptive") => Ok(Some(true)),
        Some("disabled") => Ok(Some(false)),
        _ => Err(bad(
            "thinking.type",
            "`thinking.type` must be `enabled`, `adaptive` or `disabled`",
        )),
    }
}

/// `output_config.format` (or the beta's `output_format`): a JSON schema the reply's text
/// must match, as OpenAI's `response_format` for structured output. `effort` is accepted.
fn output_format(config: Option<&Value>, beta: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let mut format = None;
    if let Some(config) = config.filter(|v| !v.is_null()) {
        let object = config
            .as_object()
            .ok_or_else(|| bad("output_config", "`output_config` must be an object"))?;
        only_keys(object, &["format", "effort"], "output_config")?;
        if let Some(value) = object.get("format").filter(|v| !v.is_null()) {
            format = Some(("output_config.format", value));
        }
    }
    if let Some(value) = beta.filter(|v| !v.is_null()) {
        if format.is_some() {
            return Err(bad(
                "output_format",
                "`output_format` and `output_config.format` both constrain the output; send one",
            ));
        }
        format = Some(("output_format", value));
    }
    let Some((param, value)) = format else {
        return Ok(None);
    };
    let object = value
        .as_object()
        .ok_or_else(|| bad(param, "the format must be an object with a `type`"))?;
    only_keys(object, &["type", "schema"], param)?;
    if object.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Err(bad(
            format!("{param}.type"),
            "the only format type is `json_schema`",
        ));
    }
    let schema = object
        .get("schema")
        .filter(|s| s.is_object())
        .ok_or_else(|| {
            bad(
                format!("{param}.schema"),
                "a JSON schema object is required",
            )
        })?;
    Ok(Some(json!({
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ChatRequest, ApiError> {
        serde_json::from_value::<MessagesRequest>(body)
            .unwrap()
            .to_chat(false)
    }

    #[test]
    fn a_tool_round_trip_becomes_calls_then_tool_turns() {
        let request = chat(json!({
            "model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "Be brief."}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": ""},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {"type": "text", "text": "Thanks"}]},
            ],
        }))
        .unwrap();
        let roles: Vec<&str> = request.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        let calls = request.messages[2].tool_calls.as_ref().unwrap();
        assert_eq!(calls[0]["function"]["arguments"], json!({"city": "Paris"}));
        assert_eq!(request.messages[3].tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(request.body.tool_choice, Some(json!("required")));
        assert_eq!(request.body.parallel_tool_calls, Some(false));
        assert_eq!(
            request.body.tools.unwrap()[0]["function"]["name"],
            "get_weather"
        );
        assert!(!request.continue_final);
    }

    #[test]
    fn refusals_name_the_block_at_fault() {
        let image = json!({"type": "image", "source": {"type": "base64", "data": ""}});
        for (body, param) in [
            (
                json!({"messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (json!({"max_tokens": 1}), "messages"),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": [image]}]}),
                "messages.0.content.0.type",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
                       "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                "tools.0.type",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
                       "container": "c"}),
                "container",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "robot", "content": "x"}]}),
                "messages.0.role",
            ),
        ] {
            let error = chat(body.clone()).err().unwrap();
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn a_system_message_between_turns_joins_the_users_words() {
        let request = chat(json!({
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}],
        }))
        .unwrap();
        assert_eq!(request.messages, [ChatMessage::new("user", "a\n\nb")]);
    }

    #[test]
    fn a_final_assistant_message_is_continued_and_a_schema_constrains() {
        let request = chat(json!({
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "{"}],
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}},
                              "effort": "low"},
            "thinking": {"type": "disabled"},
        }))
        .unwrap();
        assert!(request.continue_final);
        assert_eq!(
            request.body.response_format.unwrap()["json_schema"]["schema"],
            json!({"type": "object"})
        );
        assert_eq!(request.kwargs["enable_thinking"], json!(false));
    }
}
