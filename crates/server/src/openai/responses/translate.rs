//! A Responses request translated into the chat request the server already plans and runs:
//! input items become chat messages, function tools chat tools, `text.format` a
//! `response_format`. Nothing here tokenizes or samples; `plan_chat` does, as for chat.

use serde_json::{json, Map, Value};

use crate::api::api_error::ApiError;
use crate::api::generation_request::{GenerationRequest, MessageIn};
use crate::openai::responses::output::item_id;
use crate::openai::responses::request::ResponsesRequest;

/// The chat request, and the conversation (input items, oldest first, without the
/// instructions) that a later `previous_response_id` continues.
pub struct Translated {
    pub chat: GenerationRequest,
    pub conversation: Vec<Value>,
}

/// `earlier`: the items of the response named by `previous_response_id` (its input and its
/// output), which come before this request's input.
pub fn translate(body: &ResponsesRequest, earlier: Vec<Value>) -> Result<Translated, ApiError> {
    let input = input_items(body.input.as_ref())?;
    let mut messages = Vec::new();
    if let Some(instructions) = body.instructions.as_ref().filter(|i| !i.is_empty()) {
        messages.push(message("system", Value::String(instructions.clone())));
    }
    // Items carried from the earlier response were checked when they were first sent.
    for (i, item) in earlier.iter().enumerate() {
        add_item(
            &mut messages,
            item,
            &format!("previous_response_id (item {i})"),
        )?;
    }
    for (i, item) in input.iter().enumerate() {
        add_item(&mut messages, item, &format!("input[{i}]"))?;
    }
    if messages.is_empty() {
        return Err(ApiError::bad_param(
            "input",
            "`input` is required: a string or a list of input items",
        ));
    }
    let mut conversation = earlier;
    conversation.extend(input.into_iter().map(listed));
    let chat = GenerationRequest {
        model: body.model.clone(),
        messages: Some(messages),
        max_tokens: body.max_output_tokens,
        temperature: body.temperature,
        top_p: body.top_p,
        tools: body.tools.as_ref().map(chat_tools).transpose()?,
        tool_choice: body
            .tool_choice
            .as_ref()
            .map(chat_tool_choice)
            .transpose()?,
        parallel_tool_calls: body.parallel_tool_calls,
        response_format: text_format(body.text.as_ref())?,
        ..GenerationRequest::default()
    };
    Ok(Translated { chat, conversation })
}

/// An error of the chat plan, its `param` spelled as the Responses request spells it.
pub fn responses_param(mut error: ApiError) -> ApiError {
    if let Some(param) = &error.param {
        let renamed = [
            ("response_format.json_schema.", "text.format."),
            ("response_format", "text.format"),
            ("max_tokens", "max_output_tokens"),
            ("messages", "input"),
        ]
        .iter()
        .find_map(|(chat, ours)| param.strip_prefix(chat).map(|rest| format!("{ours}{rest}")));
        if let Some(renamed) = renamed {
            error.param = Some(renamed.replace(".function.", "."));
        } else if param.starts_with("tools[") {
            error.param = Some(param.replace(".function.", "."));
        }
    }
    error
}

fn input_items(input: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    match input {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![json!({
            "type": "message", "role": "user", "content": text,
        })]),
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(_) => Err(ApiError::bad_param(
            "input",
            "`input` must be a string or a list of input items",
        )),
    }
}

/// An input item as `GET /v1/responses/{id}/input_items` lists it: with an `id` (one is
/// given where the client sent none) and a message's content as a list of parts.
fn listed(mut item: Value) -> Value {
    let Some(object) = item.as_object_mut() else {
        return item;
    };
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_owned();
    if kind == "message" {
        object.insert("type".into(), "message".into());
        if let Some(Value::String(text)) = object.get("content") {
            let part = if object.get("role").and_then(Value::as_str) == Some("assistant") {
                json!({"type": "output_text", "text": text, "annotations": []})
            } else {
                json!({"type": "input_text", "text": text})
            };
            object.insert("content".into(), json!([part]));
        }
    }
    if object.get("id").is_none_or(Value::is_null) {
        let prefix = match kind.as_str() {
            "function_call" => "fc",
            "function_call_output" => "fco",
            "reasoning" => "rs",
            _ => "msg",
        };
        object.insert("id".into(), item_id(prefix).into());
    }
    item
}

fn message(role: &str, content: Value) -> MessageIn {
    MessageIn {
        role: role.to_owned(),
        content,
        tool_calls: None,
        tool_call_id: None,
    }
}

/// Keys an item may carry besides the ones read: ids and statuses from an earlier
/// response's output, which a client sends back as they are.
fn check_keys(item: &Map<String, Value>, at: &str, read: &[&str]) -> Result<(), ApiError> {
    const BOOKKEEPING: [&str; 3] = ["id", "status", "phase"];
    match item
        .keys()
        .find(|k| !read.contains(&k.as_str()) && !BOOKKEEPING.contains(&k.as_str()))
    {
        Some(key) if !item[key].is_null() => Err(ApiError::bad_param(
            format!("{at}.{key}"),
            format!("`{key}` is not supported on this input item"),
        )),
        _ => Ok(()),
    }
}

fn add_item(messages: &mut Vec<MessageIn>, item: &Value, at: &str) -> Result<(), ApiError> {
    let item = item
        .as_object()
        .ok_or_else(|| ApiError::bad_param(at, "each input item must be an object"))?;
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match kind {
        "message" => {
            check_keys(item, at, &["type", "role", "content"])?;
            let role = item.get("role").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_param(format!("{at}.role"), "a message needs a `role`")
            })?;
            if !["user", "system", "developer", "assistant"].contains(&role) {
                return Err(ApiError::bad_param(
                    format!("{at}.role"),
                    format!("unsupported role `{role}`; use user, system, developer or assistant"),
                ));
            }
            let content = content_text(item.get("content"), &format!("{at}.content"))?;
            messages.push(message(role, Value::String(content)));
        }
        "function_call" => {
            check_keys(
                item,
                at,
                &["type", "call_id", "name", "arguments", "namespace"],
            )?;
            let field = |key: &str| {
                item.get(key).and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad_param(
                        format!("{at}.{key}"),
                        format!("a `function_call` item needs a string `{key}`"),
                    )
                })
            };
            let call = json!({
                "id": field("call_id")?,
                "type": "function",
                "function": {"name": field("name")?, "arguments": field("arguments")?},
            });
            // Calls that follow an assistant turn belong to it, as one chat turn holds them.
            match messages.last_mut() {
                Some(last) if last.role == "assistant" => {
                    last.tool_calls.get_or_insert_with(Vec::new).push(call)
                }
                _ => {
                    let mut turn = message("assistant", Value::Null);
                    turn.tool_calls = Some(vec![call]);
                    messages.push(turn);
                }
            }
        }
        "function_call_output" => {
            check_keys(item, at, &["type", "call_id", "output"])?;
            let call_id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_param(
                    format!("{at}.call_id"),
                    "a `function_call_output` item needs a string `call_id`",
                )
            })?;
            let output = content_text(item.get("output"), &format!("{at}.output"))?;
            let mut turn = message("tool", Value::String(output));
            turn.tool_call_id = Some(call_id.to_owned());
            messages.push(turn);
        }
        // Earlier reasoning is not shown to the model again, as chat templates leave past
        // turns' reasoning out.
        "reasoning" => check_keys(
            item,
            at,
            &["type", "summary", "content", "encrypted_content"],
        )?,
        other => {
            return Err(ApiError::bad_param(
                format!("{at}.type"),
                format!(
                    "input items of type `{other}` are not supported; use `message`, \
                     `function_call`, `function_call_output` or `reasoning`"
                ),
            ))
        }
    }
    Ok(())
}

/// A message's content or a call's output: a string, or a list of text parts.
fn content_text(content: Option<&Value>, at: &str) -> Result<String, ApiError> {
    let parts = match content {
        None | Some(Value::Null) => return Ok(String::new()),
        Some(Value::String(text)) => return Ok(text.clone()),
        Some(Value::Array(parts)) => parts,
        Some(_) => {
            return Err(ApiError::bad_param(
                at,
                "content must be a string or a list of content parts",
            ))
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let kind = part.get("type").and_then(Value::as_str);
        match kind {
            Some("input_text" | "output_text" | "text" | "refusal") => {
                let key = if kind == Some("refusal") {
                    "refusal"
                } else {
                    "text"
                };
                let text = part.get(key).and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad_param(
                        format!("{at}[{j}].{key}"),
                        format!("a text part needs a string `{key}`"),
                    )
                })?;
                texts.push(text);
            }
            Some(other) => {
                return Err(ApiError::bad_param(
                    format!("{at}[{j}].type"),
                    format!(
                        "content parts of type `{other}` are not supported: this model takes \
                         text only (`input_text`)"
                    ),
                ))
            }
            None => {
                return Err(ApiError::bad_param(
                    format!("{at}[{j}]"),
                    "each content part needs a `type`",
                ))
            }
        }
    }
    Ok(texts.join("\n"))
}

/// Responses' flat function tools as chat's nested ones.
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let list = tools
        .as_array()
        .ok_or_else(|| ApiError::bad_param("tools", "`tools` must be a list of function tools"))?;
    list.iter()
        .enumerate()
        .map(|(i, tool)| {
            let at = format!("tools[{i}]");
            let object = tool
                .as_object()
                .ok_or_else(|| ApiError::bad_param(&at, "each tool must be an object"))?;
            let kind = object.get("type").and_then(Value::as_str).unwrap_or("");
            if kind != "function" {
                return Err(ApiError::bad_param(
                    format!("{at}.type"),
                    format!("tools of type `{kind}` are not supported; only `function` tools"),
                ));
            }
            // `strict` is accepted as chat accepts it: a forced call is always held to the
            // schema, a call under `auto` is parsed from the reply.
            check_keys(
                object,
                &at,
                &["type", "name", "description", "parameters", "strict"],
            )?;
            let mut function = Map::new();
            for key in ["name", "description", "parameters"] {
                if let Some(value) = object.get(key) {
                    function.insert(key.into(), value.clone());
                }
            }
            Ok(json!({"type": "function", "function": function}))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn chat_tool_choice(choice: &Value) -> Result<Value, ApiError> {
    match choice {
        Value::String(_) | Value::Null => Ok(choice.clone()),
        Value::Object(object) if object.get("type").and_then(Value::as_str) == Some("function") => {
            let name = object.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_param(
                    "tool_choice.name",
                    "a function `tool_choice` needs a `name`",
                )
            })?;
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(ApiError::bad_param(
            "tool_choice",
            "`tool_choice` must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \
             \"name\": ...}; hosted tools and `allowed_tools` are not supported",
        )),
    }
}

/// `text.format` as chat's `response_format`; `text.verbosity` only at its default.
fn text_format(text: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_null()) else {
        return Ok(None);
    };
    let object = text
        .as_object()
        .ok_or_else(|| ApiError::bad_param("text", "`text` must be an object"))?;
    for (key, value) in object {
        match key.as_str() {
            "format" => {}
            "verbosity" if value.is_null() || value == "medium" => {}
            "verbosity" => {
                return Err(ApiError::bad_param(
                    "text.verbosity",
                    "only `verbosity: \"medium\"` is supported: the model's length is set \
                     by `max_output_tokens`",
                ))
            }
            _ => {
                return Err(ApiError::bad_param(
                    format!("text.{key}"),
                    format!("unknown field `text.{key}`"),
                ))
            }
        }
    }
    let Some(format) = object.get("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    let bad = |why: &str| ApiError::bad_param("text.format", why.to_owned());
    let format = format
        .as_object()
        .ok_or_else(|| bad("`text.format` must be an object with a `type`"))?;
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut spec = Map::new();
            for key in ["name", "schema", "strict", "description"] {
                if let Some(value) = format.get(key) {
                    spec.insert(key.into(), value.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": spec})))
        }
        _ => Err(bad(
            "`text.format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> ResponsesRequest {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_string_input_is_one_user_message_after_the_instructions() {
        let t = translate(
            &body(json!({"input": "Hi", "instructions": "Be brief."})),
            Vec::new(),
        )
        .unwrap();
        let messages = t.chat.messages.unwrap();
        assert_eq!(messages[0].role, "system");
        assert_eq!(messages[1].role, "user");
        assert_eq!(messages[1].content, "Hi");
        // The instructions are not part of the conversation a later response continues.
        assert_eq!(t.conversation.len(), 1);
        let item = &t.conversation[0];
        assert!(item["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(
            item["content"],
            json!([{"type": "input_text", "text": "Hi"}])
        );
    }

    #[test]
    fn calls_join_the_assistant_turn_and_outputs_become_tool_turns() {
        let t = translate(
            &body(json!({"input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}",
                 "id": "fc_1", "status": "completed"},
                {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ]})),
            Vec::new(),
        )
        .unwrap();
        let messages = t.chat.messages.unwrap();
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool"]);
        assert_eq!(messages[1].tool_calls.as_ref().unwrap().len(), 2);
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("c1"));
    }

    #[test]
    fn images_hosted_tools_and_unknown_items_are_refused_by_path() {
        for (value, param) in [
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
                "input[0].content[0].type",
            ),
            (
                json!({"input": [{"type": "web_search_call"}]}),
                "input[0].type",
            ),
            (
                json!({"input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"input": [{"role": "user", "content": "x", "name": "n"}]}),
                "input[0].name",
            ),
            (
                json!({"input": "x", "text": {"verbosity": "low"}}),
                "text.verbosity",
            ),
            (json!({}), "input"),
            (json!({"input": []}), "input"),
        ] {
            let error = translate(&body(value.clone()), Vec::new())
                .err()
                .unwrap_or_else(|| panic!("{value} was accepted"));
            assert_eq!(error.param.as_deref(), Some(param), "{value}");
        }
    }

    #[test]
    fn tools_choice_and_format_take_the_chat_shapes() {
        let t = translate(
            &body(json!({
                "input": "x",
                "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"},
                           "strict": true}],
                "tool_choice": {"type": "function", "name": "f"},
                "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            })),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(t.chat.tools.unwrap()[0]["function"]["name"], "f");
        assert_eq!(t.chat.tool_choice.unwrap()["function"]["name"], "f");
        assert_eq!(
            t.chat.response_format.unwrap()["json_schema"]["schema"],
            json!({"type": "object"})
        );
    }

    #[test]
    fn chat_params_are_renamed_to_the_responses_fields() {
        let renamed = |param: &str| {
            responses_param(ApiError::bad_param(param, "x"))
                .param
                .unwrap()
        };
        assert_eq!(renamed("max_tokens"), "max_output_tokens");
        assert_eq!(renamed("tools[1].function.name"), "tools[1].name");
        assert_eq!(
            renamed("response_format.json_schema.schema"),
            "text.format.schema"
        );
    }
}
