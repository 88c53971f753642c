//! `ToolGrammar`: the Lark grammar (llguidance's dialect) that holds a reply to tool calls
//! when `tool_choice` is `required` or names a function.
//!
//! The reply must be one `<tool_call>` block — several with `parallel_tool_calls` — whose JSON
//! is `{"name": <a callable function>, "arguments": <valid under that function's parameters>}`.
//! Each function gets its own `%json` alternative, so a name always comes with arguments that
//! match *its* schema, and the result always parses with `ToolCallParser`.

use serde_json::{json, Value};

use crate::structured_output::{ConstraintKind, StructuredOutput};
use crate::tools::tool_request::ToolRequest;

/// The parameter a tool grammar's errors are reported under: a schema llguidance cannot
/// compile sits in `tools`.
const PARAM: &str = "tools";

pub struct ToolGrammar;

impl ToolGrammar {
    /// The constraint for a forced tool choice; `None` for `auto`, which is parsed, not held.
    pub fn constraint(request: &ToolRequest) -> Option<StructuredOutput> {
        request.is_forced().then(|| StructuredOutput {
            kind: ConstraintKind::Lark(Self::lark(request)),
            param: PARAM.into(),
        })
    }

    pub fn lark(request: &ToolRequest) -> String {
        let callable = request.callable();
        let start = if request.parallel {
            "start: tool_call (\"\\n\" tool_call)*"
        } else {
            "start: tool_call"
        };
        let alternatives: Vec<String> = (0..callable.len()).map(|i| format!("fn_{i}")).collect();
        let mut lark = format!(
            "{start}\ntool_call: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: {}\n",
            alternatives.join(" | ")
        );
        for (i, tool) in callable.iter().enumerate() {
            lark.push_str(&format!(
                "fn_{i}: %json {}\n",
                call_schema(&tool.name, &tool.parameters)
            ));
        }
        lark
    }
}

/// The call object of one function, written as OpenAI writes JSON (`{"a": 1}`) and without
/// free whitespace, which a small model would otherwise spend its budget on.
fn call_schema(name: &str, parameters: &Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"const": name},
            "arguments": closed(parameters),
        },
        "required": ["name", "arguments"],
        "additionalProperties": false,
        "x-guidance": {
            "item_separator": ", ",
            "key_separator": ": ",
            "whitespace_flexible": false,
        },
    })
}

/// The parameters with keys beyond the declared ones forbidden, unless the tool says
/// otherwise: JSON Schema allows any extra key by default, and under a forced choice a small
/// model then invents keys until `max_tokens` cuts the call off (SmolLM2 did, on a one-key
/// weather tool). A function has no use for arguments it does not declare.
fn closed(parameters: &Value) -> Value {
    let mut parameters = parameters.clone();
    if let Some(object) = parameters.as_object_mut() {
        let is_object = object.get("type").and_then(Value::as_str) == Some("object")
            || object.contains_key("properties");
        if is_object && !object.contains_key("additionalProperties") {
            object.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
    parameters
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tool_request::{ToolChoice, ToolFunction};

    fn request(choice: ToolChoice, parallel: bool) -> ToolRequest {
        let tool = |name: &str| ToolFunction {
            name: name.into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
        };
        ToolRequest {
            tools: vec![tool("first"), tool("second")],
            choice,
            parallel,
        }
    }

    #[test]
    fn required_offers_every_function_and_auto_is_not_held() {
        let lark = ToolGrammar::lark(&request(ToolChoice::Required, true));
        assert!(lark.contains("call: fn_0 | fn_1"), "{lark}");
        assert!(lark.contains(r#""const":"second""#), "{lark}");
        assert!(lark.contains(r#"("\n" tool_call)*"#), "{lark}");
        assert!(ToolGrammar::constraint(&request(ToolChoice::Auto, true)).is_none());
    }

    #[test]
    fn undeclared_argument_keys_are_forbidden_unless_the_tool_allows_them() {
        let open = json!({"type": "object", "properties": {"x": {}}, "additionalProperties": true});
        let bare = json!({"type": "object", "properties": {"x": {}}});
        assert_eq!(closed(&bare)["additionalProperties"], json!(false));
        assert_eq!(closed(&open)["additionalProperties"], json!(true));
        assert_eq!(
            closed(&json!({"type": "string"})),
            json!({"type": "string"})
        );
        let lark = ToolGrammar::lark(&request(ToolChoice::Required, false));
        // Both tools' call objects and both argument objects.
        assert_eq!(
            lark.matches(r#""additionalProperties":false"#).count(),
            4,
            "{lark}"
        );
    }

    #[test]
    fn a_named_function_without_parallel_calls_allows_one_call_of_it() {
        let lark = ToolGrammar::lark(&request(ToolChoice::Named("second".into()), false));
        assert!(lark.contains("call: fn_0\n"), "{lark}");
        assert!(!lark.contains(r#""const":"first""#), "{lark}");
        assert!(lark.starts_with("start: tool_call\n"), "{lark}");
    }
}
