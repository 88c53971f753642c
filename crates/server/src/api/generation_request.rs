//! `GenerationRequest`: the body of `/v1/completions` and `/v1/chat/completions` as sent.
//!
//! Both endpoints share one struct because they share nearly every field; a field of the other
//! endpoint, and any field not modelled here (kept in `other`), is judged by `field_policy`:
//! accepted only where it cannot change the output, refused by name otherwise. Fields whose JSON shape varies (`prompt`, `stop`, `logprobs`, message
//! content) stay `serde_json::Value` here and are checked with messages a user can act on.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::api::api_error::ApiError;
use crate::text::chat_template::ChatMessage;

#[derive(Debug, Default, Deserialize)]
pub struct GenerationRequest {
    pub model: Option<String>,
    pub prompt: Option<Value>,
    pub messages: Option<Vec<MessageIn>>,
    pub add_generation_prompt: Option<bool>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub n: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Value>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// Completions: a count of alternatives. Chat: a flag, with the count in `top_logprobs`.
    pub logprobs: Option<Value>,
    pub top_logprobs: Option<i64>,
    pub ignore_eos: Option<bool>,
    /// tokenmill's own: `false` keeps this request out of speculative decoding (its outputs
    /// are the same either way; only its steps' shape changes).
    pub speculative: Option<bool>,
    pub min_tokens: Option<i64>,
    pub priority: Option<i32>,
    pub skip_special_tokens: Option<bool>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    /// Token id (as a string, since JSON keys are strings) → bias in [-100, 100].
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// vLLM's field: a matched stop string stays at the end of the text.
    pub include_stop_str_in_output: Option<bool>,
    /// vLLM's chat field: extra variables for the chat template (`enable_thinking`).
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// vLLM's field: logprobs name tokens as `token_id:<id>` instead of their text.
    pub return_tokens_as_token_ids: Option<bool>,
    /// vLLM's completions field: logprobs of the prompt tokens, with this many alternatives.
    pub prompt_logprobs: Option<i64>,
    /// OpenAI's output format: `text`, `json_object` or `json_schema` (see `structured_output`).
    pub response_format: Option<Value>,
    /// vLLM's output constraint: `json`, `regex`, `choice`, `grammar` or `json_object`.
    pub structured_outputs: Option<Value>,
    /// vLLM's older spellings of `structured_outputs`' keys.
    pub guided_json: Option<Value>,
    pub guided_regex: Option<Value>,
    pub guided_choice: Option<Value>,
    pub guided_grammar: Option<Value>,
    /// Chat: functions the model may call, checked by `ToolRequest`.
    pub tools: Option<Value>,
    /// Chat: `none`, `auto`, `required` or one named function.
    pub tool_choice: Option<Value>,
    /// Chat: whether one reply may hold several tool calls (default true).
    pub parallel_tool_calls: Option<bool>,
    /// SGLang's spelling of `include_stop_str_in_output` (routers add it, `false`).
    pub no_stop_trim: Option<bool>,
    /// vLLM's chat field: the reply continues the last (assistant) message instead of
    /// opening a new turn; the template's generation prompt is left out.
    pub continue_final_message: Option<bool>,
    /// SGLang's chat field (default true): with `--reasoning-parser`, reasoning goes to
    /// `reasoning_content`; `false` leaves it in `content`.
    pub separate_reasoning: Option<bool>,
    /// SGLang's chat field (default true): `false` streams the reasoning as one chunk, when
    /// it is complete, instead of as it is generated.
    pub stream_reasoning: Option<bool>,
    /// vLLM's chat field (default true): `false` drops the reasoning from the reply.
    pub include_reasoning: Option<bool>,
    /// Every field not named above, for `field_policy::check_fields` to accept or refuse.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// Unknown message fields (`name`) are refused: the template would never see them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Value,
    /// An assistant turn's tool calls (its `content` may then be null).
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` turn: the id of the call it answers.
    pub tool_call_id: Option<String>,
}

/// What a completion request's `prompt` holds, before tokenization.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// Splits `prompt` into the prompts it holds (one completion choice set per prompt).
pub fn prompt_inputs(prompt: Option<&Value>) -> Result<Vec<PromptInput>, ApiError> {
    text_or_token_inputs("prompt", prompt)
}

/// Splits the field `name` (`prompt`, or an embedding request's `input`) into the inputs it
/// holds: a string, a list of strings, a list of token ids or a list of token-id lists.
pub fn text_or_token_inputs(
    name: &str,
    value: Option<&Value>,
) -> Result<Vec<PromptInput>, ApiError> {
    let bad = || {
        ApiError::bad_param(
            name,
            format!(
                "`{name}` must be a string, a list of strings, a list of token ids or a list \
                 of token-id lists"
            ),
        )
    };
    let value = value.ok_or_else(|| ApiError::bad_param(name, format!("`{name}` is required")))?;
    let inputs = match value {
        Value::String(text) => vec![PromptInput::Text(text.clone())],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .map(|v| PromptInput::Text(v.as_str().unwrap_or_default().to_owned()))
            .collect(),
        Value::Array(items) if items.iter().all(Value::is_number) => {
            vec![PromptInput::Tokens(token_ids(items).ok_or_else(bad)?)]
        }
        Value::Array(items) if items.iter().all(Value::is_array) => items
            .iter()
            .map(|list| token_ids(list.as_array()?).map(PromptInput::Tokens))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if inputs.is_empty() {
        return Err(ApiError::bad_param(name, format!("`{name}` is empty")));
    }
    Ok(inputs)
}

fn token_ids(items: &[Value]) -> Option<Vec<u32>> {
    items
        .iter()
        .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
        .collect()
}

/// `stop` as a list: a single string, a list of strings, or nothing.
pub fn stop_strings(stop: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let bad = || ApiError::bad_param("stop", "`stop` must be a string or a list of strings");
    match stop {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// Roles a chat template is given; `tool` is passed through, and a template that cannot
/// render it refuses the conversation with its own message.
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// Role names as templates know them: OpenAI's newer `developer` is the `system` role.
fn template_role(role: &str) -> Option<&'static str> {
    match role {
        "developer" => Some("system"),
        other => ROLES.iter().copied().find(|&known| known == other),
    }
}

/// Checks roles and flattens content (a string, or a list of `{"type": "text"}` parts).
pub fn chat_messages(messages: Option<&[MessageIn]>) -> Result<Vec<ChatMessage>, ApiError> {
    let messages =
        messages.ok_or_else(|| ApiError::bad_param("messages", "`messages` is required"))?;
    if messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let role = template_role(&message.role).ok_or_else(|| {
                ApiError::bad_param(
                    format!("messages[{i}].role"),
                    format!(
                        "unsupported role `{}`; use system, developer, user, assistant or tool",
                        message.role
                    ),
                )
            })?;
            let content = message_text(&message.content)
                .map_err(|why| ApiError::bad_param(format!("messages[{i}].content"), why))?;
            let mut turn = ChatMessage::new(role, content);
            if let Some(calls) = &message.tool_calls {
                let param = format!("messages[{i}].tool_calls");
                if role != "assistant" {
                    return Err(ApiError::bad_param(
                        param,
                        "only assistant messages carry `tool_calls`",
                    ));
                }
                let calls = calls
                    .iter()
                    .enumerate()
                    .map(|(j, call)| {
                        template_tool_call(call)
                            .map_err(|why| ApiError::bad_param(format!("{param}[{j}]"), why))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                turn.tool_calls = Some(calls);
            }
            if let Some(id) = &message.tool_call_id {
                if role != "tool" {
                    return Err(ApiError::bad_param(
                        format!("messages[{i}].tool_call_id"),
                        "only tool messages carry `tool_call_id`",
                    ));
                }
                turn.tool_call_id = Some(id.clone());
            }
            Ok(turn)
        })
        .collect()
}

/// A call as Hugging Face templates read it: `arguments` as a JSON object, not the JSON text
/// OpenAI sends, since templates write it with `tojson` (text would come out quoted twice).
/// Arguments that are not valid JSON stay text: the conversation is the caller's record.
fn template_tool_call(call: &Value) -> Result<Value, String> {
    let function = call
        .get("function")
        .and_then(Value::as_object)
        .ok_or("a tool call needs a `function` object")?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a tool call's function needs a string `name`")?;
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::String(text)) => {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
        }
        Some(object @ Value::Object(_)) => object.clone(),
        Some(_) => return Err("`arguments` must be a JSON string".to_owned()),
    };
    let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
    Ok(serde_json::json!({
        "id": id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }))
}

fn message_text(content: &Value) -> Result<String, String> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            let texts = parts
                .iter()
                .map(
                    |part| match (part["type"].as_str(), part["text"].as_str()) {
                        (Some("text"), Some(text)) => Ok(text),
                        (Some("text"), None) => Err("a text part needs a string `text`".to_owned()),
                        (Some(other), _) => Err(format!(
                            "content parts of type `{other}` are not supported; only `text`"
                        )),
                        (None, _) => Err("each content part needs a `type`".to_owned()),
                    },
                )
                .collect::<Result<Vec<_>, _>>()?;
            Ok(texts.join("\n"))
        }
        _ => Err("content must be a string or a list of content parts".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_prompt_shape_is_understood() {
        let text = PromptInput::Text("a".into());
        assert_eq!(
            prompt_inputs(Some(&json!("a"))).unwrap(),
            vec![text.clone()]
        );
        assert_eq!(
            prompt_inputs(Some(&json!(["a", "a"]))).unwrap(),
            vec![text.clone(), text]
        );
        assert_eq!(
            prompt_inputs(Some(&json!([1, 2]))).unwrap(),
            vec![PromptInput::Tokens(vec![1, 2])]
        );
        assert_eq!(
            prompt_inputs(Some(&json!([[1], [2, 3]]))).unwrap(),
            vec![
                PromptInput::Tokens(vec![1]),
                PromptInput::Tokens(vec![2, 3])
            ]
        );
    }

    #[test]
    fn negative_token_ids_and_mixed_lists_are_rejected() {
        for bad in [
            json!([-1]),
            json!([1, "a"]),
            json!(5),
            json!([]),
            json!([[1], [-2]]),
        ] {
            let error = prompt_inputs(Some(&bad)).unwrap_err();
            assert_eq!(error.param.as_deref(), Some("prompt"), "{bad}");
        }
    }

    #[test]
    fn content_parts_are_joined_and_images_refused() {
        let ok: Vec<MessageIn> = serde_json::from_value(json!([
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ]))
        .unwrap();
        assert_eq!(chat_messages(Some(&ok)).unwrap()[0].content, "a\nb");
        let image: Vec<MessageIn> = serde_json::from_value(json!([
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
        ]))
        .unwrap();
        assert!(chat_messages(Some(&image)).is_err());
    }

    #[test]
    fn unknown_roles_and_empty_conversations_are_rejected() {
        let robot: Vec<MessageIn> =
            serde_json::from_value(json!([{"role": "robot", "content": "hi"}])).unwrap();
        assert_eq!(
            chat_messages(Some(&robot)).unwrap_err().param.as_deref(),
            Some("messages[0].role")
        );
        assert!(chat_messages(Some(&[])).is_err());
    }

    #[test]
    fn assistant_tool_calls_reach_the_template_with_arguments_as_objects() {
        let messages: Vec<MessageIn> = serde_json::from_value(json!([
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "f", "arguments": "{\"a\": 1}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        ]))
        .unwrap();
        let turns = chat_messages(Some(&messages)).unwrap();
        let calls = turns[0].tool_calls.as_ref().unwrap();
        assert_eq!(calls[0]["function"]["arguments"], json!({"a": 1}));
        assert_eq!(turns[0].content, "");
        assert_eq!(turns[1].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn tool_fields_on_the_wrong_role_are_refused_by_field() {
        let misplaced: Vec<MessageIn> = serde_json::from_value(json!([
            {"role": "user", "content": "x", "tool_calls": []}
        ]))
        .unwrap();
        let error = chat_messages(Some(&misplaced)).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[0].tool_calls"));
        let nameless: Vec<MessageIn> = serde_json::from_value(json!([
            {"role": "assistant", "tool_calls": [{"function": {}}]}
        ]))
        .unwrap();
        let error = chat_messages(Some(&nameless)).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[0].tool_calls[0]"));
    }

    #[test]
    fn stop_may_be_one_string_or_many() {
        assert_eq!(stop_strings(Some(&json!("x"))).unwrap(), vec!["x"]);
        assert_eq!(
            stop_strings(Some(&json!(["x", "y"]))).unwrap(),
            vec!["x", "y"]
        );
        assert!(stop_strings(Some(&json!([1]))).is_err());
    }
}
