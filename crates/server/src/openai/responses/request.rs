//! `ResponsesRequest`: the body of `POST /v1/responses` as sent, and what is done with each
//! field it does not model: accepted where it cannot change the output, refused by name
//! otherwise (the same rule as `field_policy` applies to the chat and completions routes).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::api::api_error::ApiError;
use crate::generate::field_policy::FieldPolicy;

#[derive(Debug, Default, Deserialize)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    /// A string (one user message) or a list of items (messages, function calls and their
    /// outputs, reasoning).
    pub input: Option<Value>,
    /// A system message put ahead of the conversation; not carried to a later response that
    /// names this one in `previous_response_id` (as OpenAI documents it).
    pub instructions: Option<String>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// `{"format": {...}, "verbosity": ...}`: the format goes through structured output.
    pub text: Option<Value>,
    /// `{"effort", "summary"}`: only unset values are accepted (see `REFUSED`).
    pub reasoning: Option<Value>,
    pub stream: Option<bool>,
    pub stream_options: Option<Value>,
    /// Keep the response for `previous_response_id` and `GET` (default true, as OpenAI's).
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    /// Echoed back in the response (and kept with it), read by no one else.
    pub metadata: Option<Value>,
    /// Every field not named above, for [`check_fields`].
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Fields that change nothing here: the caller's bookkeeping, cache and tier hints.
pub const NO_EFFECT_FIELDS: [&str; 5] = [
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
];

fn never(_: &Value) -> bool {
    false
}
fn is_empty_list(value: &Value) -> bool {
    value.as_array().is_some_and(Vec::is_empty)
}

const fn refused(reason: &'static str, off: fn(&Value) -> bool) -> FieldPolicy {
    FieldPolicy::Refused { reason, off }
}

/// Fields of OpenAI's Responses API that ask for something this server cannot do.
pub const REFUSED_FIELDS: [(&str, FieldPolicy); 11] = [
    (
        "include",
        refused(
            "`include` is not supported: there are no logprobs, encrypted reasoning or tool \
             outputs to add",
            is_empty_list,
        ),
    ),
    (
        "truncation",
        refused(
            "only `truncation: \"disabled\"` is supported: a conversation longer than the \
             context is refused, never cut",
            |v| v == "disabled",
        ),
    ),
    (
        "background",
        refused("background responses are not supported", |v| v == false),
    ),
    (
        "top_logprobs",
        refused("`top_logprobs` is not supported on /v1/responses", |v| {
            v.as_u64() == Some(0)
        }),
    ),
    (
        "max_tool_calls",
        refused("`max_tool_calls` is not supported", never),
    ),
    (
        "conversation",
        refused(
            "conversations are not supported; chain responses with `previous_response_id`",
            never,
        ),
    ),
    (
        "prompt",
        refused(
            "prompt templates are not supported; send `instructions` and `input`",
            never,
        ),
    ),
    (
        "context_management",
        refused("`context_management` is not supported", is_empty_list),
    ),
    ("moderation", refused("moderation is not supported", never)),
    (
        "background_options",
        refused("background responses are not supported", never),
    ),
    (
        "prompt_cache_options",
        refused(
            "`prompt_cache_options` is not supported; the prefix cache needs no options",
            never,
        ),
    ),
];

/// Refuses the first field that would otherwise be dropped.
pub fn check_fields(body: &ResponsesRequest) -> Result<(), ApiError> {
    for (name, value) in &body.other {
        if value.is_null() || NO_EFFECT_FIELDS.contains(&name.as_str()) {
            continue;
        }
        match REFUSED_FIELDS.iter().find(|(known, _)| known == name) {
            Some((_, FieldPolicy::Refused { off, .. })) if off(value) => {}
            Some((_, FieldPolicy::Refused { reason, .. })) => {
                return Err(ApiError::bad_param(name.clone(), *reason))
            }
            _ => {
                return Err(ApiError::bad_param(
                    name.clone(),
                    format!(
                        "unknown field `{name}`; docs/api.md lists the fields /v1/responses \
                         accepts"
                    ),
                ))
            }
        }
    }
    check_reasoning(body.reasoning.as_ref())
}

/// `reasoning` asks for an effort or a summary, neither of which this server can give; the
/// reasoning the model writes is returned as `reasoning` items under `--reasoning-parser`.
fn check_reasoning(reasoning: Option<&Value>) -> Result<(), ApiError> {
    let Some(reasoning) = reasoning.filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let object = reasoning
        .as_object()
        .ok_or_else(|| ApiError::bad_param("reasoning", "`reasoning` must be an object"))?;
    for (key, value) in object {
        if value.is_null() {
            continue;
        }
        let why = match key.as_str() {
            "effort" => {
                "`reasoning.effort` is not supported: the model reasons as its chat \
                         template has it (see --reasoning-parser)"
            }
            "summary" | "generate_summary" => {
                "reasoning summaries are not supported; the reasoning itself comes back as \
                 `reasoning` items under --reasoning-parser"
            }
            _ => "unknown field",
        };
        return Err(ApiError::bad_param(format!("reasoning.{key}"), why));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(body: Value) -> Result<(), ApiError> {
        check_fields(&serde_json::from_value(body).unwrap())
    }

    #[test]
    fn unsupported_fields_are_refused_by_name_and_off_values_accepted() {
        for (field, value) in [
            ("include", json!(["message.output_text.logprobs"])),
            ("truncation", json!("auto")),
            ("background", json!(true)),
            ("conversation", json!("conv_1")),
            ("frequency_penalty", json!(1.0)),
        ] {
            let error = check(json!({ field: value })).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(field));
        }
        check(json!({
            "include": [], "truncation": "disabled", "background": false, "user": "u",
            "service_tier": "auto", "prompt_cache_key": "k", "reasoning": {"effort": null},
        }))
        .unwrap();
        let error = check(json!({"reasoning": {"effort": "high"}})).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("reasoning.effort"));
    }

    #[test]
    fn the_api_document_names_every_refused_and_no_effect_field() {
        let doc = include_str!("../../../../../docs/api.md");
        let section = doc
            .split("## POST /v1/responses")
            .nth(1)
            .expect("docs/api.md has a /v1/responses section");
        let names = REFUSED_FIELDS
            .iter()
            .map(|(name, _)| *name)
            .chain(NO_EFFECT_FIELDS);
        for name in names {
            assert!(
                section.contains(&format!("`{name}`")),
                "docs/api.md's /v1/responses section misses `{name}`"
            );
        }
    }
}
