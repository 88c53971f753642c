//! What `/v1/messages` does with each top-level field it does not model: accept it because
//! it changes nothing here, or refuse it by name because it asks for something tokenmill
//! cannot do. Any other field is refused as unknown. `docs/api.md` lists the same fields; a
//! test below holds the two together.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::api_error::ApiError;

/// Accepted and read by no one: prompt caching is automatic here (`cache_control` marks
/// nothing the prefix cache does not already keep), and a latency tier or the inference
/// region mean nothing to a single server.
pub const NO_EFFECT_FIELDS: [&str; 3] = ["cache_control", "service_tier", "inference_geo"];

/// Known fields that ask for Anthropic-hosted machinery, refused unless empty.
pub const REFUSED_FIELDS: [(&str, &str); 3] = [
    (
        "container",
        "`container` asks for Anthropic's code-execution container, which tokenmill does not run",
    ),
    (
        "mcp_servers",
        "`mcp_servers` asks the server to call MCP servers itself; tokenmill only returns \
         `tool_use` blocks for the client to run",
    ),
    (
        "context_management",
        "`context_management` edits other than `clear_thinking_*` ask the server to edit the \
         conversation (clear old tool results); tokenmill renders the conversation as sent",
    ),
];

/// A value that asks for nothing: null, an empty list or an empty object.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// `context_management` whose every edit clears thinking (Claude Code sends
/// `clear_thinking_20251015`): thinking blocks never reach the prompt here, so there is no
/// thinking to keep or clear, and the edit changes nothing.
fn clears_only_thinking(value: &Value) -> bool {
    let Some(object) = value.as_object() else {
        return false;
    };
    let edits = object.get("edits").and_then(Value::as_array);
    object.keys().all(|k| k == "edits")
        && edits.is_some_and(|edits| {
            edits.iter().all(|edit| {
                edit.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.starts_with("clear_thinking_"))
            })
        })
}

/// Refuses the first unmodelled field that would otherwise be dropped.
pub fn check_fields(other: &BTreeMap<String, Value>) -> Result<(), ApiError> {
    for (name, value) in other {
        if NO_EFFECT_FIELDS.contains(&name.as_str()) || is_empty(value) {
            continue;
        }
        if name == "context_management" && clears_only_thinking(value) {
            continue;
        }
        let reason = match REFUSED_FIELDS.iter().find(|(known, _)| known == name) {
            Some((_, reason)) => (*reason).to_owned(),
            None => {
                format!("unknown field `{name}`; docs/api.md lists the fields /v1/messages accepts")
            }
        };
        return Err(ApiError::bad_param(name.clone(), reason));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refused_and_unknown_fields_are_named_and_empty_ones_pass() {
        let fields = |v: Value| -> BTreeMap<String, Value> { serde_json::from_value(v).unwrap() };
        check_fields(&fields(json!({"service_tier": "auto", "container": null,
                                     "mcp_servers": [], "cache_control": {"type": "ephemeral"}})))
        .unwrap();
        let thinking = json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]});
        check_fields(&fields(json!({ "context_management": thinking }))).unwrap();
        let tools = json!({"edits": [{"type": "clear_tool_uses_20250919"}]});
        let error = check_fields(&fields(json!({ "context_management": tools }))).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("context_management"));
        for name in ["container", "mcp_servers", "frobnicate"] {
            let error = check_fields(&fields(json!({ name: ["x"] }))).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(name));
        }
    }

    #[test]
    fn the_api_document_names_every_refused_and_no_effect_field() {
        let doc = include_str!("../../../../docs/api.md");
        let section = doc
            .split("## POST /v1/messages")
            .nth(1)
            .expect("docs/api.md has a `## POST /v1/messages` section");
        let names = REFUSED_FIELDS
            .iter()
            .map(|(name, _)| *name)
            .chain(NO_EFFECT_FIELDS);
        for name in names.chain(crate::anthropic::request::MODELLED_FIELDS) {
            assert!(
                section.contains(&format!("`{name}`")),
                "docs/api.md's /v1/messages section misses `{name}`"
            );
        }
    }
}
