//! Structured output over HTTP against the real default model: JSON schemas (`response_format`,
//! `structured_outputs.json`, `guided_json`), regexes, choices and Lark grammars hold on every
//! reply; constraints leave what they share a batch with untouched, survive preemption, and a
//! constraint llguidance cannot compile is a 400 naming its field.

use crate::common;
use crate::common::schema_check;

use std::sync::OnceLock;

use common::*;
use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokenmill_engine::EngineArgs;
use tokenmill_server::http::api_server::{spawn_server, ServerHandle, ServerOptions};
use tokenmill_server::model::model_loader;

/// Schemas with nested objects, bounded arrays, enums, bounded numbers, optional fields and
/// `$ref`s, each with a prompt that invites it.
fn schemas() -> Vec<(&'static str, Value)> {
    let name = json!({"type": "string", "minLength": 1, "maxLength": 20});
    vec![
        (
            "a person",
            json!({"type": "object", "properties": {"name": name, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}),
        ),
        (
            "a colour",
            json!({"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"], "additionalProperties": false}),
        ),
        (
            "three numbers",
            json!({"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 3, "maxItems": 3}),
        ),
        (
            "a shopping list",
            json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 15}, "minItems": 1, "maxItems": 4}}, "required": ["items"], "additionalProperties": false}),
        ),
        (
            "a city with coordinates",
            json!({"type": "object", "properties": {"city": name, "location": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90}, "lon": {"type": "number", "minimum": -180, "maximum": 180}}, "required": ["lat", "lon"], "additionalProperties": false}}, "required": ["city", "location"], "additionalProperties": false}),
        ),
        ("a yes or no answer", json!({"type": "boolean"})),
        (
            "a book",
            json!({"type": "object", "properties": {"title": {"type": "string", "maxLength": 30}, "year": {"type": "integer", "minimum": 1450, "maximum": 2025}, "genre": {"enum": ["fiction", "science", "history"]}}, "required": ["title", "year", "genre"], "additionalProperties": false}),
        ),
        (
            "an optional nickname",
            json!({"type": "object", "properties": {"name": name, "nickname": name}, "required": ["name"], "additionalProperties": false}),
        ),
        (
            "a point",
            json!({"$defs": {"coord": {"type": "integer", "minimum": 0, "maximum": 9}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/coord"}, "y": {"$ref": "#/$defs/coord"}}, "required": ["x", "y"], "additionalProperties": false}),
        ),
        (
            "a team",
            json!({"$defs": {"member": {"type": "object", "properties": {"name": name, "role": {"enum": ["lead", "dev"]}}, "required": ["name", "role"], "additionalProperties": false}}, "type": "object", "properties": {"members": {"type": "array", "items": {"$ref": "#/$defs/member"}, "minItems": 1, "maxItems": 2}}, "required": ["members"], "additionalProperties": false}),
        ),
        (
            "a temperature",
            json!({"type": "object", "properties": {"celsius": {"type": "number", "exclusiveMinimum": -274, "maximum": 60}}, "required": ["celsius"], "additionalProperties": false}),
        ),
        (
            "a status",
            json!({"type": "string", "enum": ["ok", "failed", "pending"]}),
        ),
        (
            "a version",
            json!({"type": "object", "properties": {"major": {"type": "integer", "minimum": 0, "maximum": 99}, "minor": {"type": "integer", "minimum": 0, "maximum": 99}, "tag": {"type": ["string", "null"], "maxLength": 8}}, "required": ["major", "minor", "tag"], "additionalProperties": false}),
        ),
        (
            "a matrix",
            json!({"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 2}, "minItems": 2, "maxItems": 2}),
        ),
        (
            "an event",
            json!({"type": "object", "properties": {"kind": {"const": "event"}, "day": {"type": "integer", "minimum": 1, "maximum": 31}, "month": {"enum": ["jan", "feb", "mar"]}}, "required": ["kind", "day", "month"], "additionalProperties": false}),
        ),
        (
            "a score or nothing",
            json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 10}, {"type": "null"}]}),
        ),
        (
            "a product",
            json!({"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}, "price": {"type": "number", "minimum": 0, "maximum": 1000}, "tags": {"type": "array", "items": {"enum": ["new", "sale", "eco"]}, "maxItems": 3}}, "required": ["sku", "price"], "additionalProperties": false}),
        ),
        (
            "a tree",
            json!({"$defs": {"leaf": {"type": "object", "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 5}}, "required": ["value"], "additionalProperties": false}}, "type": "object", "properties": {"left": {"$ref": "#/$defs/leaf"}, "right": {"$ref": "#/$defs/leaf"}}, "required": ["left", "right"], "additionalProperties": false}),
        ),
        (
            "some settings",
            json!({"type": "object", "properties": {"dark_mode": {"type": "boolean"}, "font_size": {"type": "integer", "minimum": 8, "maximum": 32}, "language": {"enum": ["en", "fr", "de"]}}, "required": ["dark_mode", "font_size", "language"], "additionalProperties": false}),
        ),
        (
            "a list of pets",
            json!({"type": "object", "properties": {"pets": {"type": "array", "items": {"type": "object", "properties": {"species": {"enum": ["cat", "dog"]}, "legs": {"type": "integer", "minimum": 0, "maximum": 4}}, "required": ["species", "legs"], "additionalProperties": false}, "minItems": 1, "maxItems": 3}}, "required": ["pets"], "additionalProperties": false}),
        ),
        (
            "an address",
            json!({"type": "object", "properties": {"street": name, "number": {"type": "integer", "minimum": 1, "maximum": 999}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "country": {"enum": ["FR", "US", "DE"]}}, "required": ["street", "number", "zip", "country"], "additionalProperties": false}),
        ),
        (
            "a rating",
            json!({"type": "object", "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5}, "comment": {"type": "string", "maxLength": 25}}, "required": ["stars"], "additionalProperties": false}),
        ),
    ]
}

/// A chat request for `what` as JSON under `schema`, greedy.
fn schema_request(what: &str, schema: &Value) -> Value {
    json!({
        "messages": [{"role": "user", "content": format!("Give me {what} as JSON.")}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": true}},
        "temperature": 0,
        "max_tokens": 160,
    })
}

fn assert_valid(schema: &Value, reply: &Value, what: &str) {
    let choice = &reply["choices"][0];
    let text = choice["message"]["content"]
        .as_str()
        .or_else(|| choice["text"].as_str())
        .unwrap_or_else(|| panic!("{what}: no text in {reply}"));
    assert_eq!(choice["finish_reason"], "stop", "{what}: {text}");
    let value: Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{what}: the reply is not JSON ({e}): {text}"));
    schema_check::check(schema, &value).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
}

#[tokio::test]
async fn replies_under_twenty_two_json_schemas_parse_and_validate() {
    crate::common::skip_without_model!();
    let schemas = schemas();
    assert!(schemas.len() >= 20);
    let replies = join_all(
        schemas
            .iter()
            .map(|(what, schema)| post_json("/v1/chat/completions", schema_request(what, schema))),
    )
    .await;
    for ((what, schema), (status, reply)) in schemas.iter().zip(replies) {
        assert_eq!(status, StatusCode::OK, "{what}: {reply}");
        assert_valid(schema, &reply, what);
    }
    // The masks were timed; the quantiles are for the record (see docs/performance.md).
    let (_, exposition) = get_text("/metrics").await;
    let count = metric(
        &exposition,
        "tokenmill:structured_output_mask_seconds_count{model_name=\"SmolLM2-135M-Instruct.Q4_1\"}",
    );
    assert!(count > 0.0, "no token mask was timed");
    let sum = metric(
        &exposition,
        "tokenmill:structured_output_mask_seconds_sum{model_name=\"SmolLM2-135M-Instruct.Q4_1\"}",
    );
    eprintln!(
        "token masks: {count} timed, mean {:.1} µs, median ≤ {} s, p99 ≤ {} s",
        sum / count * 1e6,
        mask_quantile_bound(&exposition, 0.5),
        mask_quantile_bound(&exposition, 0.99),
    );
}

/// The upper bound of the histogram bucket holding quantile `q` of the mask times.
fn mask_quantile_bound(exposition: &str, q: f64) -> String {
    let prefix = "tokenmill:structured_output_mask_seconds_bucket{";
    let buckets: Vec<(String, f64)> = exposition
        .lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| {
            let bound = rest.split("le=\"").nth(1)?.split('"').next()?.to_owned();
            let count = rest.rsplit(' ').next()?.parse().ok()?;
            Some((bound, count))
        })
        .collect();
    let total = buckets.last().map_or(0.0, |b| b.1);
    buckets
        .iter()
        .find(|(_, cumulative)| *cumulative >= q * total)
        .map_or("?".into(), |(bound, _)| bound.clone())
}

#[test]
fn the_schema_checker_refuses_what_breaks_a_schema() {
    let (_, person) = &schemas()[0];
    schema_check::check(person, &json!({"name": "Ann", "age": 30})).unwrap();
    for bad in [
        json!({"name": "Ann"}),
        json!({"name": "Ann", "age": 300}),
        json!({"name": "", "age": 3}),
        json!({"name": "Ann", "age": 3, "x": 1}),
        json!([1]),
    ] {
        assert!(schema_check::check(person, &bad).is_err(), "{bad}");
    }
    let (_, point) = &schemas()[8];
    assert!(schema_check::check(point, &json!({"x": 10, "y": 1})).is_err());
    let (_, product) = &schemas()[16];
    assert!(schema_check::check(product, &json!({"sku": "abc-123", "price": 1})).is_err());
}

#[tokio::test]
async fn every_way_of_asking_for_json_is_honoured_on_both_endpoints() {
    crate::common::skip_without_model!();
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 100}}, "required": ["answer"], "additionalProperties": false});
    let chat = |field: &str, value: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "What is 6 times 7? Reply in JSON."}],
            "temperature": 0,
            "max_tokens": 40,
        });
        body[field] = value;
        body
    };
    let bodies = [
        (
            "/v1/chat/completions",
            chat("structured_outputs", json!({"json": schema})),
        ),
        (
            "/v1/chat/completions",
            chat("guided_json", json!(schema.to_string())),
        ),
        (
            "/v1/completions",
            json!({"prompt": "The answer, as JSON:", "guided_json": schema, "temperature": 0, "max_tokens": 40}),
        ),
    ];
    for (path, body) in bodies {
        let (status, reply) = post_json(path, body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert_valid(&schema, &reply, &body.to_string());
    }
    // `json_object`: any object. Left free, the small model nests keys past any budget, so
    // the prompt spells out a small one.
    let mut body = chat("response_format", json!({"type": "json_object"}));
    body["messages"][0]["content"] =
        json!("Reply with the JSON object {\"answer\": 42} and nothing else.");
    let (status, reply) = post_json("/v1/chat/completions", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_valid(&json!({"type": "object"}), &reply, "json_object");
}

#[tokio::test]
async fn a_streamed_schema_reply_reassembles_into_valid_json() {
    crate::common::skip_without_model!();
    let (what, schema) = &schemas()[6];
    let mut body = schema_request(what, schema);
    body["stream"] = json!(true);
    let chunks = post_stream("/v1/chat/completions", body).await;
    let text = streamed_text(&chunks, 0);
    assert_eq!(streamed_finish_reason(&chunks, 0).as_deref(), Some("stop"));
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    schema_check::check(schema, &value).unwrap();
}

/// `count` completions of `prompt` at temperature 1 under `constraint` (a `structured_outputs`
/// object), sent as several `n` requests at once.
async fn sampled_texts(prompt: &str, constraint: Value, count: usize) -> Vec<String> {
    let per_request = 10;
    let requests = (0..count.div_ceil(per_request)).map(|i| {
        post_json(
            "/v1/completions",
            json!({
                "prompt": prompt,
                "structured_outputs": constraint,
                "temperature": 1.0,
                "n": per_request,
                "seed": 1000 + i,
                "max_tokens": 24,
            }),
        )
    });
    let mut texts = Vec::new();
    for (status, reply) in join_all(requests).await {
        assert_eq!(status, StatusCode::OK, "{reply}");
        for choice in reply["choices"].as_array().unwrap() {
            assert_eq!(choice["finish_reason"], "stop", "{choice}");
            texts.push(choice["text"].as_str().unwrap().to_owned());
        }
    }
    texts
}

#[tokio::test]
async fn fifty_sampled_replies_match_the_regex() {
    crate::common::skip_without_model!();
    let pattern = "[A-Z][a-z]{2,6}-[0-9]{2,3}";
    let whole = regex::Regex::new(&format!("^(?:{pattern})$")).unwrap();
    let texts = sampled_texts("A product code:", json!({"regex": pattern}), 50).await;
    assert_eq!(texts.len(), 50);
    for text in &texts {
        assert!(whole.is_match(text), "{text:?} does not match {pattern}");
    }
}

#[tokio::test]
async fn fifty_sampled_replies_are_one_of_the_choices() {
    crate::common::skip_without_model!();
    let choices = ["red", "green", "blue", "dark \"purple\""];
    let texts = sampled_texts("My favourite colour is", json!({"choice": choices}), 50).await;
    assert_eq!(texts.len(), 50);
    for text in &texts {
        assert!(choices.contains(&text.as_str()), "{text:?} is no choice");
    }
}

#[tokio::test]
async fn a_lark_grammar_shapes_the_reply() {
    crate::common::skip_without_model!();
    let grammar = r#"
        start: expr
        expr: num | expr " + " num
        num: /[1-9][0-9]?/
    "#;
    let whole = regex::Regex::new(r"^[1-9][0-9]?( \+ [1-9][0-9]?)*$").unwrap();
    for (field, value) in [
        ("structured_outputs", json!({"grammar": grammar})),
        ("guided_grammar", json!(grammar)),
    ] {
        let mut body =
            json!({"prompt": "A sum: ", "temperature": 0.8, "seed": 3, "max_tokens": 24, "n": 4});
        body[field] = value;
        let (status, reply) = post_json("/v1/completions", body).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        for choice in reply["choices"].as_array().unwrap() {
            let text = choice["text"].as_str().unwrap();
            // A sum may go on until max_tokens; what was written must still be a sum.
            let text = text.trim_end_matches(|c: char| !c.is_ascii_digit());
            assert!(whole.is_match(text), "{text:?}");
        }
    }
}

/// Greedy token ids of a completion, with or without a constraint.
async fn greedy_ids(server: &ServerHandle, prompt: &str, constraint: Option<Value>) -> Vec<String> {
    let mut body = json!({
        "prompt": prompt,
        "temperature": 0,
        "max_tokens": 40,
        "logprobs": 0,
        "return_tokens_as_token_ids": true,
    });
    if let Some(constraint) = constraint {
        body["structured_outputs"] = constraint;
    }
    let url = format!("{}/v1/completions", server.base_url());
    let response = client().post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let reply: Value = response.json().await.unwrap();
    serde_json::from_value(reply["choices"][0]["logprobs"]["tokens"].clone()).unwrap()
}

#[tokio::test]
async fn a_constrained_and_a_free_request_batched_together_answer_as_alone() {
    crate::common::skip_without_model!();
    let server = server();
    let schema = json!({"json": schemas()[6].1.clone()});
    let constrained_prompt = "A book as JSON:";
    let free_prompt = "Once upon a time";
    let alone_constrained = greedy_ids(server, constrained_prompt, Some(schema.clone())).await;
    let alone_free = greedy_ids(server, free_prompt, None).await;
    for _ in 0..2 {
        let (constrained, free) = tokio::join!(
            greedy_ids(server, constrained_prompt, Some(schema.clone())),
            greedy_ids(server, free_prompt, None),
        );
        assert_eq!(constrained, alone_constrained);
        assert_eq!(free, alone_free);
    }
    assert_ne!(
        alone_constrained,
        greedy_ids(server, constrained_prompt, None).await
    );
}

/// A server whose KV pool holds 20 blocks of 16 tokens: eight concurrent requests of ~100
/// tokens each must preempt one another.
fn small_pool_server() -> &'static ServerHandle {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        // Not `start_server`: its flags already fix the pool size.
        let args = <Cli as clap::Parser>::parse_from(["test", "--num-kv-blocks", "20"]).engine;
        let model = model_loader::load(&args).expect("loading the default model");
        spawn_server(
            model,
            ServerOptions::default(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .expect("starting the server")
    })
}

#[tokio::test]
async fn preempted_constrained_requests_end_as_they_would_alone() {
    crate::common::skip_without_model!();
    let small = small_pool_server();
    let constraint = json!({"json": schemas()[19].1.clone()});
    let prompts: Vec<String> = (0..8)
        .map(|i| format!("Pets in house number {i}, as JSON, written out in full:"))
        .collect();
    let alone = join_all(
        prompts
            .iter()
            .map(|p| greedy_ids(server(), p, Some(constraint.clone()))),
    )
    .await;
    let crowded = join_all(
        prompts
            .iter()
            .map(|p| greedy_ids(small, p, Some(constraint.clone()))),
    )
    .await;
    assert_eq!(crowded, alone);
    let exposition = metrics_text(&small.base_url()).await;
    let preemptions = metric(
        &exposition,
        "tokenmill:num_preemptions_total{model_name=\"SmolLM2-135M-Instruct.Q4_1\"}",
    );
    assert!(preemptions > 0.0, "the small pool never preempted");
}

#[tokio::test]
async fn a_constraint_llguidance_cannot_compile_is_a_400_naming_its_field() {
    crate::common::skip_without_model!();
    let cases = [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}}}),
            "response_format.json_schema.schema",
        ),
        (
            json!({"structured_outputs": {"json": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}}),
            "structured_outputs.json",
        ),
        (
            json!({"structured_outputs": {"regex": "[a-"}}),
            "structured_outputs.regex",
        ),
        (
            json!({"guided_grammar": "start: undefined_rule"}),
            "guided_grammar",
        ),
        (
            json!({"structured_outputs": {"choice": []}}),
            "structured_outputs.choice",
        ),
        (
            json!({"response_format": {"type": "json_schema"}}),
            "response_format.json_schema",
        ),
    ];
    for (fields, param) in cases {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        for (k, v) in fields.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, reply) = post_json("/v1/chat/completions", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
        assert_eq!(reply["error"]["param"], param, "{reply}");
        assert_eq!(reply["error"]["type"], "invalid_request_error");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(!message.is_empty());
    }
    // llguidance's own words reach the user.
    let (_, reply) = post_json(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "structured_outputs": {"json": {"type": "integer", "minimum": 5, "maximum": 1}}}),
    )
    .await;
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("could not be compiled:") && message.len() > 40,
        "{message}"
    );
}
