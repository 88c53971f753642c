//! `FieldPolicy`: what the server does with each field of a generation request that it does not
//! implement — accept it because it cannot change the output, or refuse it by name.
//!
//! A field an agent relies on (`functions`) that is accepted and dropped makes it
//! believe it holds a contract it does not: every such field is refused with a 400 naming it,
//! and so is any field this server has never heard of. `docs/api.md` lists the same fields; a
//! test holds the two together.

use serde_json::{json, Value};

use crate::api::api_error::ApiError;
use crate::api::generation_request::GenerationRequest;
use crate::generate::request_plan::Endpoint;

/// What happens to a field the request types do not model.
#[derive(Debug, Clone, Copy)]
pub enum FieldPolicy {
    /// Accepted and read by no one, because it cannot change what is generated.
    NoEffect,
    /// Refused with this reason, unless its value is the one that asks for nothing.
    Refused {
        reason: &'static str,
        /// The value that means "off" (`tools: []`), accepted like an absent field.
        off: fn(&Value) -> bool,
    },
}

/// Fields OpenAI clients send that change nothing here: bookkeeping for the caller's own records
/// (`user`, `metadata`, `store`) and a latency tier.
pub const NO_EFFECT_FIELDS: [&str; 4] = ["user", "metadata", "store", "service_tier"];

/// OpenAI's pre-`tools` spelling of function calling: refused rather than translated, since
/// clients that still send it are expected to read `function_call` back, a shape not produced.
const LEGACY_FUNCTIONS: &str =
    "`functions` and `function_call` are deprecated; use `tools` and `tool_choice`";

fn never(_: &Value) -> bool {
    false
}
fn is_one(value: &Value) -> bool {
    value.as_u64() == Some(1)
}
fn is_text_modality(value: &Value) -> bool {
    *value == json!(["text"])
}

/// Fields known from OpenAI's or vLLM's API that this server refuses, with the reason a user sees.
pub const REFUSED_FIELDS: [(&str, FieldPolicy); 9] = [
    ("functions", refused(LEGACY_FUNCTIONS, never)),
    ("function_call", refused(LEGACY_FUNCTIONS, never)),
    (
        "best_of",
        refused("`best_of` above 1 is not supported; use `n`", is_one),
    ),
    (
        "use_beam_search",
        refused("beam search is not supported", |v| v == false),
    ),
    (
        "reasoning_effort",
        refused("`reasoning_effort` is not supported", never),
    ),
    (
        "modalities",
        refused("only the `text` modality is supported", is_text_modality),
    ),
    ("audio", refused("audio output is not supported", never)),
    (
        "prediction",
        refused("predicted outputs are not supported", never),
    ),
    // SGLang's field; its routers send `false` with every request.
    (
        "return_hidden_states",
        refused("hidden states are not returned by this server", |v| {
            v == false
        }),
    ),
];

const fn refused(reason: &'static str, off: fn(&Value) -> bool) -> FieldPolicy {
    FieldPolicy::Refused { reason, off }
}

/// The policy for a field the request types do not model; `None` for a field never heard of.
pub fn policy(name: &str) -> Option<FieldPolicy> {
    if NO_EFFECT_FIELDS.contains(&name) {
        return Some(FieldPolicy::NoEffect);
    }
    REFUSED_FIELDS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, policy)| *policy)
}

/// Refuses the first field of `body` that this server would otherwise drop: one it does not
/// implement, one it has never heard of, or one that belongs to the other endpoint.
pub fn check_fields(body: &GenerationRequest, endpoint: Endpoint) -> Result<(), ApiError> {
    for (name, value) in &body.other {
        // JSON null is how clients say "not set".
        if value.is_null() {
            continue;
        }
        match policy(name) {
            Some(FieldPolicy::NoEffect) => {}
            Some(FieldPolicy::Refused { off, .. }) if off(value) => {}
            Some(FieldPolicy::Refused { reason, .. }) => {
                return Err(ApiError::bad_param(name.clone(), reason))
            }
            None => {
                return Err(ApiError::bad_param(
                    name.clone(),
                    format!(
                        "unknown field `{name}`; docs/api.md lists the fields tokenmill accepts"
                    ),
                ))
            }
        }
    }
    check_endpoint_fields(body, endpoint)
}

/// Fields that only one endpoint reads, refused on the other rather than dropped.
fn check_endpoint_fields(body: &GenerationRequest, endpoint: Endpoint) -> Result<(), ApiError> {
    let completions_only = [
        ("prompt", body.prompt.is_some()),
        ("suffix", body.suffix.is_some()),
        ("prompt_logprobs", body.prompt_logprobs.is_some()),
    ];
    let chat_only = [
        ("messages", body.messages.is_some()),
        (
            "add_generation_prompt",
            body.add_generation_prompt.is_some(),
        ),
        ("top_logprobs", body.top_logprobs.is_some()),
        ("chat_template_kwargs", body.chat_template_kwargs.is_some()),
        ("tools", body.tools.is_some()),
        ("tool_choice", body.tool_choice.is_some()),
        ("parallel_tool_calls", body.parallel_tool_calls.is_some()),
        (
            "continue_final_message",
            body.continue_final_message == Some(true),
        ),
        ("separate_reasoning", body.separate_reasoning == Some(false)),
        ("stream_reasoning", body.stream_reasoning == Some(false)),
        ("include_reasoning", body.include_reasoning == Some(false)),
    ];
    let (foreign, home) = match endpoint {
        Endpoint::Completions => (chat_only.as_slice(), "/v1/chat/completions"),
        Endpoint::Chat => (completions_only.as_slice(), "/v1/completions"),
    };
    match foreign.iter().find(|(_, present)| *present) {
        Some((name, _)) => Err(ApiError::bad_param(
            *name,
            format!("`{name}` is a field of {home} only"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: Value, endpoint: Endpoint) -> Result<(), ApiError> {
        let body: GenerationRequest = serde_json::from_value(body).unwrap();
        check_fields(&body, endpoint)
    }

    #[test]
    fn unsupported_and_unknown_fields_are_refused_by_name() {
        for (field, value) in [
            ("functions", json!([{"name": "f"}])),
            ("function_call", json!("auto")),
            ("cache_prompt", json!(true)),
            ("best_of", json!(3)),
        ] {
            let mut body = json!({"prompt": "a"});
            body[field] = value;
            let error = check(body, Endpoint::Completions).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(field));
            assert_eq!(error.status, 400);
        }
    }

    #[test]
    fn harmless_fields_and_off_values_are_accepted() {
        let body = json!({
            "messages": [], "user": "u", "store": false, "metadata": {"a": "b"},
            "best_of": 1, "functions": null, "service_tier": "auto",
        });
        check(body, Endpoint::Chat).unwrap();
    }

    #[test]
    fn a_field_of_the_other_endpoint_is_refused() {
        let error = check(json!({"prompt": "a"}), Endpoint::Chat).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("prompt"));
        let error = check(json!({"top_logprobs": 2}), Endpoint::Completions).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("top_logprobs"));
        let error = check(json!({"tools": []}), Endpoint::Completions).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("tools"));
    }

    #[test]
    fn the_api_document_names_every_refused_and_no_effect_field() {
        let doc = include_str!("../../../../docs/api.md");
        let names = REFUSED_FIELDS
            .iter()
            .map(|(name, _)| *name)
            .chain(NO_EFFECT_FIELDS);
        for name in names {
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/api.md misses `{name}`"
            );
        }
    }
}
