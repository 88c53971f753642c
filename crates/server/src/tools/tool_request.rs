//! `ToolRequest`: a chat request's `tools`, `tool_choice` and `parallel_tool_calls`, checked.
//!
//! Every malformed entry is a 400 naming the exact field (`tools[1].function.name`), because an
//! agent framework that gets prose back for a tool it misdeclared cannot tell what went wrong.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::api::api_error::ApiError;
use crate::api::generation_request::GenerationRequest;

/// One function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFunction {
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON schema; a function declared without one takes any object.
    pub parameters: Value,
}

impl ToolFunction {
    /// The entry as OpenAI's request spells it, for templates and the tools system prompt.
    pub fn openai_json(&self) -> Value {
        let mut function = serde_json::Map::new();
        function.insert("name".into(), self.name.clone().into());
        if let Some(description) = &self.description {
            function.insert("description".into(), description.clone().into());
        }
        function.insert("parameters".into(), self.parameters.clone());
        json!({"type": "function", "function": function})
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may answer in text or call tools; calls are parsed from its output.
    Auto,
    /// The model must call at least one tool (enforced with a grammar).
    Required,
    /// The model must call this tool (enforced with a grammar).
    Named(String),
}

/// Tools the model is offered for one request. `tool_choice: "none"` (or no tools) gives no
/// `ToolRequest` at all: the tools are neither shown to the model nor parsed from its output.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    pub tools: Vec<ToolFunction>,
    pub choice: ToolChoice,
    /// `parallel_tool_calls`: more than one call per reply (default true, as OpenAI's).
    pub parallel: bool,
}

/// OpenAI's limit on function names, which some clients also rely on as identifiers.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ToolRequest {
    pub fn from_request(body: &GenerationRequest) -> Result<Option<Self>, ApiError> {
        let tools = match &body.tools {
            None | Some(Value::Null) => Vec::new(),
            Some(value) => tools(value)?,
        };
        let choice = match &body.tool_choice {
            None | Some(Value::Null) => None,
            Some(value) => tool_choice(value, &tools)?,
        };
        if tools.is_empty() {
            return match choice {
                Some(ToolChoice::Required | ToolChoice::Named(_)) => Err(ApiError::bad_param(
                    "tool_choice",
                    "`tool_choice` asks for a tool call but `tools` is empty",
                )),
                _ => Ok(None),
            };
        }
        if body.tool_choice.as_ref().is_some_and(|c| c == "none") {
            return Ok(None);
        }
        Ok(Some(Self {
            tools,
            choice: choice.unwrap_or(ToolChoice::Auto),
            parallel: body.parallel_tool_calls.unwrap_or(true),
        }))
    }

    /// Whether the reply is held to a grammar of tool calls rather than parsed afterwards.
    pub fn is_forced(&self) -> bool {
        self.choice != ToolChoice::Auto
    }

    /// The tools a forced call may use: the named one, or all of them.
    pub fn callable(&self) -> Vec<&ToolFunction> {
        match &self.choice {
            ToolChoice::Named(name) => self.tools.iter().filter(|t| &t.name == name).collect(),
            _ => self.tools.iter().collect(),
        }
    }
}

fn tools(value: &Value) -> Result<Vec<ToolFunction>, ApiError> {
    let list = value
        .as_array()
        .ok_or_else(|| ApiError::bad_param("tools", "`tools` must be a list of function tools"))?;
    let mut seen = HashSet::new();
    let mut functions = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let at = |key: &str| format!("tools[{i}]{key}");
        let bad = |key: &str, why: &str| ApiError::bad_param(at(key), why.to_owned());
        let entry = entry
            .as_object()
            .ok_or_else(|| bad("", "each tool must be an object"))?;
        if entry.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(
                ".type",
                "only tools of `type` `function` are supported",
            ));
        }
        let function = entry
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(".function", "a tool needs a `function` object"))?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| valid_name(name))
            .ok_or_else(|| {
                bad(
                    ".function.name",
                    "a function `name` must be 1 to 64 letters, digits, `_` or `-`",
                )
            })?;
        if !seen.insert(name.to_owned()) {
            return Err(ApiError::bad_param(
                at(".function.name"),
                format!("two tools are named `{name}`"),
            ));
        }
        let description = match function.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(_) => {
                return Err(bad(
                    ".function.description",
                    "`description` must be a string",
                ))
            }
        };
        let parameters = match function.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(schema @ Value::Object(_)) => schema.clone(),
            Some(_) => {
                return Err(bad(
                    ".function.parameters",
                    "`parameters` must be a JSON schema object",
                ))
            }
        };
        functions.push(ToolFunction {
            name: name.to_owned(),
            description,
            parameters,
        });
    }
    Ok(functions)
}

/// `"none"` gives `None`; a named function must be one of `tools`.
fn tool_choice(value: &Value, tools: &[ToolFunction]) -> Result<Option<ToolChoice>, ApiError> {
    const SHAPES: &str = "`tool_choice` must be \"none\", \"auto\", \"required\" or \
                          {\"type\": \"function\", \"function\": {\"name\": ...}}";
    let bad = || ApiError::bad_param("tool_choice", SHAPES);
    match value {
        Value::String(choice) => match choice.as_str() {
            "none" => Ok(None),
            "auto" => Ok(Some(ToolChoice::Auto)),
            "required" => Ok(Some(ToolChoice::Required)),
            _ => Err(bad()),
        },
        Value::Object(object) => {
            if object.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad());
            }
            let name = object
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    format!("`tool_choice` names `{name}`, which is not one of `tools`"),
                ));
            }
            Ok(Some(ToolChoice::Named(name.to_owned())))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<Option<ToolRequest>, ApiError> {
        let body: GenerationRequest = serde_json::from_value(body).unwrap();
        ToolRequest::from_request(&body)
    }

    fn weather() -> Value {
        json!({"type": "function", "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }})
    }

    #[test]
    fn tools_default_to_auto_with_parallel_calls() {
        let request = parse(json!({"tools": [weather()]})).unwrap().unwrap();
        assert_eq!(request.choice, ToolChoice::Auto);
        assert!(request.parallel);
        assert_eq!(request.tools[0].name, "get_weather");
        assert!(!request.is_forced());
    }

    #[test]
    fn a_named_choice_keeps_only_that_function_callable() {
        let other = json!({"type": "function", "function": {"name": "other"}});
        let request = parse(json!({
            "tools": [weather(), other],
            "tool_choice": {"type": "function", "function": {"name": "other"}},
            "parallel_tool_calls": false,
        }))
        .unwrap()
        .unwrap();
        assert_eq!(request.choice, ToolChoice::Named("other".into()));
        assert!(!request.parallel);
        let callable: Vec<&str> = request.callable().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(callable, ["other"]);
        assert_eq!(request.callable()[0].parameters, json!({"type": "object"}));
    }

    #[test]
    fn choice_none_and_empty_tools_offer_nothing() {
        assert_eq!(
            parse(json!({"tools": [weather()], "tool_choice": "none"})).unwrap(),
            None
        );
        assert_eq!(
            parse(json!({"tools": [], "tool_choice": "auto"})).unwrap(),
            None
        );
        assert_eq!(parse(json!({})).unwrap(), None);
    }

    #[test]
    fn malformed_tools_and_choices_are_refused_by_field() {
        let cases = [
            (json!({"tools": {}}), "tools"),
            (json!({"tools": [1]}), "tools[0]"),
            (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
            (
                json!({"tools": [{"type": "function"}]}),
                "tools[0].function",
            ),
            (
                json!({"tools": [weather(), {"type": "function", "function": {"name": "a b"}}]}),
                "tools[1].function.name",
            ),
            (
                json!({"tools": [weather(), weather()]}),
                "tools[1].function.name",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
                "tools[0].function.parameters",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]}),
                "tools[0].function.description",
            ),
            (
                json!({"tools": [weather()], "tool_choice": "always"}),
                "tool_choice",
            ),
            (
                json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
        ];
        for (body, param) in cases {
            let error = parse(body.clone()).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
            assert_eq!(error.status, 400);
        }
    }
}
