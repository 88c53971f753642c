//! Structured output. `StructuredOutput`, defined here: the one output constraint a request
//! asks for, read from OpenAI's `response_format`, vLLM's `structured_outputs`, or vLLM's
//! older `guided_*` fields; compiled against the vocabulary (`constraint_compiler`,
//! `grammar_tokenizer`) into the engine's per-request token mask (`grammar_constraint`).

pub mod constraint_compiler;
pub mod grammar_constraint;
pub mod grammar_tokenizer;

use serde_json::{json, Map, Value};

use crate::api::api_error::ApiError;
use crate::api::generation_request::GenerationRequest;

/// What the reply must match, and the request field that asked for it (errors name it).
#[derive(Debug, Clone, PartialEq)]
pub struct StructuredOutput {
    pub kind: ConstraintKind,
    pub param: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintKind {
    /// A JSON value matching this JSON Schema (`{"type": "object"}` for `json_object`).
    JsonSchema(Value),
    /// Text matching this regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// Text in the language of this Lark grammar (llguidance's dialect).
    Lark(String),
}

impl StructuredOutput {
    /// The request's constraint, if any; asking for two at once is refused, since one would be
    /// silently dropped.
    pub fn from_request(body: &GenerationRequest) -> Result<Option<Self>, ApiError> {
        let mut found = Vec::new();
        if let Some(format) = &body.response_format {
            found.extend(response_format(format)?);
        }
        if let Some(outputs) = &body.structured_outputs {
            found.extend(structured_outputs(outputs)?);
        }
        let guided = [
            ("json", &body.guided_json, "guided_json"),
            ("regex", &body.guided_regex, "guided_regex"),
            ("choice", &body.guided_choice, "guided_choice"),
            ("grammar", &body.guided_grammar, "guided_grammar"),
        ];
        for (key, value, field) in guided {
            if let Some(value) = value {
                found.push(constraint(key, value, field)?);
            }
        }
        match found.len() {
            0 | 1 => Ok(found.pop()),
            _ => Err(ApiError::bad_param(
                found[1].param.clone(),
                format!(
                    "`{}` and `{}` both constrain the output; send one",
                    found[0].param, found[1].param
                ),
            )),
        }
    }
}

/// OpenAI's `response_format`: `text` (no constraint), `json_object` or `json_schema`.
fn response_format(format: &Value) -> Result<Option<StructuredOutput>, ApiError> {
    const PARAM: &str = "response_format";
    let bad = |why: &str| ApiError::bad_param(PARAM, why.to_owned());
    let object = format
        .as_object()
        .ok_or_else(|| bad("`response_format` must be an object with a `type`"))?;
    let found = |kind| {
        Ok(Some(StructuredOutput {
            kind,
            param: PARAM.into(),
        }))
    };
    match object.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => found(ConstraintKind::JsonSchema(json!({"type": "object"}))),
        Some("json_schema") => {
            let spec = object
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| ApiError::bad_param(
                    "response_format.json_schema",
                    "`response_format` of type `json_schema` needs a `json_schema` object with a `name` and a `schema`",
                ))?;
            if !spec.get("name").is_some_and(Value::is_string) {
                return Err(ApiError::bad_param(
                    "response_format.json_schema.name",
                    "`json_schema.name` (a string) is required",
                ));
            }
            // OpenAI's `strict` makes the schema binding; here every schema is, so `strict`
            // changes nothing either way.
            let schema = spec.get("schema").cloned().unwrap_or_else(|| json!({}));
            Ok(Some(StructuredOutput {
                kind: ConstraintKind::JsonSchema(schema),
                param: "response_format.json_schema.schema".into(),
            }))
        }
        _ => Err(bad(
            "`response_format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

/// vLLM's `structured_outputs`: one of `json`, `regex`, `choice`, `grammar`, `json_object`.
fn structured_outputs(value: &Value) -> Result<Vec<StructuredOutput>, ApiError> {
    let object: &Map<String, Value> = value.as_object().ok_or_else(|| {
        ApiError::bad_param(
            "structured_outputs",
            "`structured_outputs` must be an object such as {\"json\": {...}}",
        )
    })?;
    let mut found = Vec::new();
    for (key, value) in object {
        let param = format!("structured_outputs.{key}");
        match key.as_str() {
            _ if value.is_null() => {}
            "json_object" if value == &json!(false) => {}
            "json_object" if value == &json!(true) => found.push(StructuredOutput {
                kind: ConstraintKind::JsonSchema(json!({"type": "object"})),
                param,
            }),
            "json" | "regex" | "choice" | "grammar" => found.push(constraint(key, value, &param)?),
            _ => {
                return Err(ApiError::bad_param(
                    param,
                    format!(
                        "`structured_outputs.{key}` is not supported; use one of `json`, \
                         `regex`, `choice`, `grammar`, `json_object`"
                    ),
                ))
            }
        }
    }
    Ok(found)
}

/// One constraint from its vLLM key (`json`, `regex`, `choice`, `grammar`) and value.
fn constraint(key: &str, value: &Value, param: &str) -> Result<StructuredOutput, ApiError> {
    let bad = |why: String| ApiError::bad_param(param, why);
    let kind = match (key, value) {
        ("json", Value::Object(_) | Value::Bool(_)) => ConstraintKind::JsonSchema(value.clone()),
        // vLLM also takes the schema as JSON text.
        ("json", Value::String(text)) => ConstraintKind::JsonSchema(
            serde_json::from_str(text)
                .map_err(|e| bad(format!("`{param}` is not a valid JSON schema: {e}")))?,
        ),
        ("regex", Value::String(regex)) => ConstraintKind::Regex(regex.clone()),
        ("grammar", Value::String(grammar)) => ConstraintKind::Lark(grammar.clone()),
        ("choice", Value::Array(items)) => {
            let choices: Option<Vec<String>> = items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect();
            match choices {
                Some(choices) if !choices.is_empty() => ConstraintKind::Choice(choices),
                _ => {
                    return Err(bad(format!(
                        "`{param}` must be a non-empty list of strings"
                    )))
                }
            }
        }
        ("json", _) => return Err(bad(format!("`{param}` must be a JSON schema object"))),
        _ => return Err(bad(format!("`{param}` must be a string"))),
    };
    Ok(StructuredOutput {
        kind,
        param: param.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<Option<StructuredOutput>, ApiError> {
        let body: GenerationRequest = serde_json::from_value(body).unwrap();
        StructuredOutput::from_request(&body)
    }

    #[test]
    fn each_way_of_asking_gives_its_constraint_and_field() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let cases = [
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}}),
                ConstraintKind::JsonSchema(schema.clone()),
                "response_format.json_schema.schema",
            ),
            (
                json!({"response_format": {"type": "json_object"}}),
                ConstraintKind::JsonSchema(json!({"type": "object"})),
                "response_format",
            ),
            (
                json!({"structured_outputs": {"regex": "[a-z]+"}}),
                ConstraintKind::Regex("[a-z]+".into()),
                "structured_outputs.regex",
            ),
            (
                json!({"structured_outputs": {"choice": ["yes", "no"]}}),
                ConstraintKind::Choice(vec!["yes".into(), "no".into()]),
                "structured_outputs.choice",
            ),
            (
                json!({"guided_json": schema.to_string()}),
                ConstraintKind::JsonSchema(schema.clone()),
                "guided_json",
            ),
            (
                json!({"guided_grammar": "start: \"a\""}),
                ConstraintKind::Lark("start: \"a\"".into()),
                "guided_grammar",
            ),
        ];
        for (body, kind, param) in cases {
            let found = parse(body).unwrap().unwrap();
            assert_eq!(found.kind, kind);
            assert_eq!(found.param, param);
        }
    }

    #[test]
    fn text_format_and_absent_fields_ask_for_nothing() {
        assert_eq!(
            parse(json!({"response_format": {"type": "text"}})).unwrap(),
            None
        );
        assert_eq!(parse(json!({"guided_regex": null})).unwrap(), None);
        assert_eq!(parse(json!({})).unwrap(), None);
    }

    #[test]
    fn malformed_or_doubled_constraints_are_refused_by_field() {
        let cases = [
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}),
                "response_format.json_schema.name",
            ),
            (
                json!({"structured_outputs": {"choice": []}}),
                "structured_outputs.choice",
            ),
            (
                json!({"structured_outputs": {"structural_tag": "x"}}),
                "structured_outputs.structural_tag",
            ),
            (json!({"guided_regex": 3}), "guided_regex"),
            (
                json!({"guided_regex": "a", "response_format": {"type": "json_object"}}),
                "guided_regex",
            ),
        ];
        for (body, param) in cases {
            let error = parse(body.clone()).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
            assert_eq!(error.status, 400);
        }
    }
}
