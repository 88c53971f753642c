//! Anthropic's Messages API over HTTP: the reply matches the chat route's for the same
//! conversation, the stream follows Anthropic's event sequence, errors have Anthropic's shape
//! and status, `x-api-key` is honoured, and the official `anthropic` Python SDK (run from
//! `tests/anthropic_sdk.py` with `TOKENMILL_PYTHON`) gets plain and streamed messages, a tool
//! round trip, a token count and its typed errors.

use crate::common;

use std::sync::OnceLock;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

fn hello(extra: Value) -> Value {
    let mut body = json!({
        "model": MODEL,
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Name a fruit."}],
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// Every `(event name, data)` of an SSE reply.
async fn events(base: &str, body: Value) -> Vec<(String, Value)> {
    let mut response = client()
        .post(format!("{base}/v1/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut text = String::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|event| {
            let field = |name: &str| {
                event
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim_start().to_owned())
                    .unwrap_or_else(|| panic!("an event without `{name}`: {event}"))
            };
            (
                field("event:"),
                serde_json::from_str(&field("data:")).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_message_says_what_the_chat_route_says_with_anthropic_usage() {
    crate::common::skip_without_model!();
    let (status, message) = post_json("/v1/messages", hello(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{message}");
    let (_, chat) = post_json(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Name a fruit."}],
               "max_tokens": 8, "temperature": 0}),
    )
    .await;
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["content"][0]["type"], "text");
    assert_eq!(
        message["content"][0]["text"],
        chat["choices"][0]["message"]["content"]
    );
    let stop = match chat["choices"][0]["finish_reason"].as_str().unwrap() {
        "length" => "max_tokens",
        _ => "end_turn",
    };
    assert_eq!(message["stop_reason"], stop);
    assert_eq!(
        message["usage"]["input_tokens"],
        chat["usage"]["prompt_tokens"]
    );
    assert_eq!(
        message["usage"]["output_tokens"],
        chat["usage"]["completion_tokens"]
    );

    let (status, count) = post_json(
        "/v1/messages/count_tokens",
        json!({"model": MODEL, "messages": [{"role": "user", "content": "Name a fruit."}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{count}");
    assert_eq!(count["input_tokens"], message["usage"]["input_tokens"]);
}

#[tokio::test]
async fn a_stream_follows_anthropics_event_sequence_and_text() {
    crate::common::skip_without_model!();
    let base = server().base_url();
    let (_, whole) = post_json("/v1/messages", hello(json!({}))).await;
    let events = events(&base, hello(json!({"stream": true}))).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "ping"], "{names:?}");
    assert_eq!(names[2], "content_block_start", "{names:?}");
    assert_eq!(
        names[names.len() - 4..],
        [
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{names:?}"
    );
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "each event's data names it");
    }
    let start = &events[0].1["message"];
    assert_eq!(
        start["usage"]["input_tokens"],
        whole["usage"]["input_tokens"]
    );
    assert_eq!(start["content"], json!([]));
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, whole["content"][0]["text"].as_str().unwrap());
    let end = &events[events.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], whole["stop_reason"]);
    assert_eq!(
        end["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
}

#[tokio::test]
async fn a_stop_sequence_is_reported_by_name() {
    crate::common::skip_without_model!();
    let (_, free) = post_json("/v1/messages", hello(json!({"max_tokens": 12}))).await;
    let text = free["content"][0]["text"].as_str().unwrap();
    // A stop sequence the greedy reply is known to reach: its third character onwards.
    let stop: String = text.chars().skip(2).take(3).collect();
    assert!(
        stop.chars().count() == 3,
        "a reply too short to test: {text:?}"
    );
    let (_, stopped) = post_json(
        "/v1/messages",
        hello(json!({"max_tokens": 12, "stop_sequences": [stop]})),
    )
    .await;
    assert_eq!(stopped["stop_reason"], "stop_sequence", "{stopped}");
    assert_eq!(stopped["stop_sequence"], stop.as_str());
    let events = events(
        &server().base_url(),
        hello(json!({"max_tokens": 12, "stop_sequences": [stop], "stream": true})),
    )
    .await;
    let end = &events[events.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "stop_sequence");
    assert_eq!(end["delta"]["stop_sequence"], stop.as_str());
}

#[tokio::test]
async fn a_forced_tool_streams_as_a_tool_use_block_of_input_json() {
    crate::common::skip_without_model!();
    let tool = json!({"name": "get_weather", "description": "Weather in a city",
                      "input_schema": {"type": "object",
                                       "properties": {"city": {"type": "string", "maxLength": 12}},
                                       "required": ["city"], "additionalProperties": false}});
    let body = hello(json!({
        "max_tokens": 40,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
    }));
    let (status, whole) = post_json("/v1/messages", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert_eq!(whole["stop_reason"], "tool_use", "{whole}");
    let call = whole["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(call["name"], "get_weather");
    assert!(call["input"]["city"].is_string(), "{call}");
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = events(&server().base_url(), streamed).await;
    let start = events
        .iter()
        .find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .expect("a tool_use block starts");
    assert_eq!(start.1["content_block"]["input"], json!({}));
    let json_text: String = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json_text).unwrap(),
        call["input"]
    );
}

#[tokio::test]
async fn errors_have_anthropics_shape_and_status() {
    crate::common::skip_without_model!();
    let user = json!([{"role": "user", "content": "x"}]);
    let cases = [
        (json!({"model": MODEL, "messages": user}), 400, "max_tokens"),
        (
            json!({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]}),
            400,
            "image",
        ),
        (
            json!({"model": MODEL, "max_tokens": 4, "messages": user, "frobnicate": 1}),
            400,
            "frobnicate",
        ),
        (
            json!({"model": MODEL, "max_tokens": 4, "messages": user, "container": "c"}),
            400,
            "container",
        ),
        (
            json!({"model": "gpt-4o", "max_tokens": 4, "messages": user}),
            404,
            "gpt-4o",
        ),
        (
            json!({"model": MODEL, "max_tokens": "many", "messages": user}),
            400,
            "max_tokens",
        ),
    ];
    for (body, status, named) in cases {
        let (got, error) = post_json("/v1/messages", body.clone()).await;
        assert_eq!(got.as_u16(), status, "{body} → {error}");
        assert_eq!(error["type"], "error", "{error}");
        let kind = if status == 404 {
            "not_found_error"
        } else {
            "invalid_request_error"
        };
        assert_eq!(error["error"]["type"], kind, "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{message} should name {named}");
    }
    // More than the context holds runs to the context's end instead of being refused (the
    // stop sequences end this one early).
    let (status, reply) = post_json(
        "/v1/messages",
        json!({"model": MODEL, "max_tokens": 10_000_000, "messages": user,
               "stop_sequences": [" ", ".", "e", "a", "\n"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    // A `claude-*` name means the model served.
    let (status, _) = post_json(
        "/v1/messages",
        json!({"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": user}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

fn keyed_server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        start_server(
            &[],
            ServerOptions {
                api_key: Some("sesame".into()),
                ..ServerOptions::default()
            },
        )
    })
}

#[tokio::test]
async fn x_api_key_is_honoured_like_the_bearer_token() {
    crate::common::skip_without_model!();
    let url = format!("{}/v1/messages", keyed_server().base_url());
    let body = json!({"model": MODEL, "max_tokens": 1,
                      "messages": [{"role": "user", "content": "x"}]});
    for (header, value, status) in [
        ("x-api-key", "sesame", 200),
        ("authorization", "Bearer sesame", 200),
        ("x-api-key", "wrong", 401),
        ("x-other", "sesame", 401),
    ] {
        let response = client()
            .post(&url)
            .header(header, value)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{header}: {value}");
        if status == 401 {
            let error: Value = response.json().await.unwrap();
            assert_eq!(error["error"]["type"], "authentication_error", "{error}");
        }
    }
}

#[test]
fn the_anthropic_python_sdk_gets_messages_streams_tools_counts_and_typed_errors() {
    crate::common::skip_without_model!();
    let base = keyed_server().base_url();
    common::python_client::run_client_script(
        "anthropic_sdk.py",
        common::python_client::Package::Optional("anthropic"),
        &[&base, MODEL, "sesame"],
    );
}

#[tokio::test]
async fn output_config_holds_the_text_to_its_json_schema() {
    crate::common::skip_without_model!();
    let schema = json!({"type": "object",
                        "properties": {"fruit": {"type": "string", "maxLength": 10}},
                        "required": ["fruit"], "additionalProperties": false});
    let (status, message) = post_json(
        "/v1/messages",
        hello(json!({"max_tokens": 40,
                     "output_config": {"format": {"type": "json_schema", "schema": schema},
                                       "effort": "low"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{message}");
    let text = message["content"][0]["text"].as_str().unwrap();
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(value["fruit"].is_string(), "{value}");
}
