//! Bad input gets an OpenAI error body with the right status, and the server keeps serving.

use crate::common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::OnceLock;
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};

fn assert_error_body(body: &Value, context: &str) {
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{context}: {body}"
    );
    assert!(error["type"].is_string(), "{context}: {body}");
    assert!(
        error.get("param").is_some() && error.get("code").is_some(),
        "{context}: {body}"
    );
}

async fn send_raw(path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let response = client()
        .post(url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("non-JSON error ({e}): {text:.200}"));
    (status, value)
}

#[tokio::test]
async fn each_kind_of_bad_input_gets_its_status_and_an_error_body() {
    crate::common::skip_without_model!();
    let (_, models) = get_text("/v1/models").await;
    let models: Value = serde_json::from_str(&models).unwrap();
    let max_model_len = models["data"][0]["max_model_len"].as_u64().unwrap() as usize;
    let too_long: Vec<u32> = vec![42; max_model_len];
    let too_long_text = "word ".repeat(max_model_len + 10);
    let cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        ("malformed JSON", "/v1/completions", br#"{"prompt": "#.to_vec(), 400),
        ("invalid UTF-8", "/v1/completions", b"{\"prompt\": \"\xff\xfe\"}".to_vec(), 400),
        ("a JSON array body", "/v1/chat/completions", b"[1, 2]".to_vec(), 400),
        ("temperature of the wrong type", "/v1/completions", json!({"prompt": "a", "temperature": "hot"}).to_string().into_bytes(), 400),
        ("max_tokens of the wrong type", "/v1/completions", json!({"prompt": "a", "max_tokens": "ten"}).to_string().into_bytes(), 400),
        ("stream of the wrong type", "/v1/completions", json!({"prompt": "a", "stream": "yes"}).to_string().into_bytes(), 400),
        ("messages of the wrong type", "/v1/chat/completions", json!({"messages": "hi"}).to_string().into_bytes(), 400),
        ("a prompt of the wrong type", "/v1/completions", json!({"prompt": {"text": "a"}}).to_string().into_bytes(), 400),
        ("no prompt", "/v1/completions", json!({"max_tokens": 3}).to_string().into_bytes(), 400),
        ("negative temperature", "/v1/completions", json!({"prompt": "a", "temperature": -1}).to_string().into_bytes(), 400),
        ("top_p above one", "/v1/completions", json!({"prompt": "a", "top_p": 1.5}).to_string().into_bytes(), 400),
        ("huge n", "/v1/completions", json!({"prompt": "a", "n": 1000}).to_string().into_bytes(), 400),
        ("negative max_tokens", "/v1/completions", json!({"prompt": "a", "max_tokens": -5}).to_string().into_bytes(), 400),
        ("too many logprobs", "/v1/completions", json!({"prompt": "a", "logprobs": 50}).to_string().into_bytes(), 400),
        ("a penalty out of range", "/v1/chat/completions", json!({"messages": [{"role": "user", "content": "a"}], "presence_penalty": 5}).to_string().into_bytes(), 400),
        ("a token id outside the vocabulary", "/v1/completions", json!({"prompt": [1, 4000000]}).to_string().into_bytes(), 400),
        ("a prompt longer than max_model_len", "/v1/completions", json!({"prompt": too_long}).to_string().into_bytes(), 400),
        ("a text prompt longer than max_model_len", "/v1/completions", json!({"prompt": too_long_text}).to_string().into_bytes(), 400),
        ("empty messages", "/v1/chat/completions", json!({"messages": []}).to_string().into_bytes(), 400),
        ("an unknown role", "/v1/chat/completions", json!({"messages": [{"role": "wizard", "content": "a"}]}).to_string().into_bytes(), 400),
        ("an image part", "/v1/chat/completions", json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}).to_string().into_bytes(), 400),
        ("an unknown model", "/v1/completions", json!({"prompt": "a", "model": "gpt-9"}).to_string().into_bytes(), 404),
        ("an unknown model for chat", "/v1/chat/completions", json!({"messages": [{"role": "user", "content": "a"}], "model": "gpt-9"}).to_string().into_bytes(), 404),
        ("tokenize without a prompt", "/tokenize", json!({}).to_string().into_bytes(), 400),
        ("detokenize with bad ids", "/detokenize", json!({"tokens": [-1]}).to_string().into_bytes(), 400),
        ("a body over 8 MiB", "/v1/completions", vec![b' '; 9 << 20], 413),
    ];
    for (what, path, body, status) in cases {
        let (got, reply) = send_raw(path, body).await;
        assert_eq!(got.as_u16(), status, "{what}: {reply}");
        assert_error_body(&reply, what);
    }
    let (status, reply) =
        post_json("/v1/completions", json!({"prompt": "Hi", "max_tokens": 2})).await;
    assert_eq!(
        status, 200,
        "the server stopped serving after bad input: {reply}"
    );
}

#[tokio::test]
async fn wrong_types_name_the_parameter() {
    crate::common::skip_without_model!();
    let (status, reply) = post_json(
        "/v1/completions",
        json!({"prompt": "a", "temperature": "hot"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(reply["error"]["param"], "temperature");
    let (_, reply) = post_json(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user"}], "n": 99}),
    )
    .await;
    assert_eq!(reply["error"]["param"], "n");
}

#[tokio::test]
async fn unknown_and_unsupported_fields_are_refused_by_name() {
    crate::common::skip_without_model!();
    let chat = common::chat_body;
    let cases = [
        (
            "/v1/completions",
            json!({"prompt": "Hi", "cache_prompt": true}),
            "cache_prompt",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"response_format": {"type": "xml"}})),
            "response_format",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tools": [{"type": "function", "function": {"name": "f g"}}]})),
            "tools[0].function.name",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tool_choice": "required"})),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"function_call": "auto"})),
            "function_call",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"prompt": "Hi"})),
            "prompt",
        ),
        (
            "/v1/completions",
            json!({"prompt": "Hi", "top_logprobs": 2}),
            "top_logprobs",
        ),
        (
            "/v1/completions",
            json!({"prompt": "Hi", "stream": true, "stream_options": {"continuous_usage_stats": true}}),
            "stream_options.continuous_usage_stats",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi", "name": "bob"}]}),
            "messages[0].name",
        ),
    ];
    for (path, body, field) in cases {
        let (status, reply) = post_json(path, body.clone()).await;
        assert_eq!(status, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["param"], field, "{body}: {reply}");
        assert_eq!(reply["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn fields_that_cannot_change_the_output_are_accepted() {
    crate::common::skip_without_model!();
    let body = json!({
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "user": "u-1",
        "store": false, "metadata": {"team": "a"}, "stream_options": null, "tools": [],
        "tool_choice": "none", "response_format": {"type": "text"},
    });
    let (status, reply) = post_json("/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["usage"]["completion_tokens"], 2);
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_answer_in_the_error_shape() {
    crate::common::skip_without_model!();
    let response = client().get(url("/v1/nothing")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    assert_error_body(&response.json().await.unwrap(), "unknown route");
    let response = client().get(url("/v1/completions")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_error_body(&response.json().await.unwrap(), "wrong method");
}

/// A second server that refuses every request as overloaded (a waiting queue of size zero), so
/// the answer can be checked deterministically.
fn locked_server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        let options = ServerOptions {
            served_model_name: Some("tiny".into()),
            ..ServerOptions::default()
        };
        start_server(&["--max-waiting", "0"], options)
    })
}

#[tokio::test]
async fn a_full_waiting_queue_answers_503_with_retry_after() {
    crate::common::skip_without_model!();
    let base = locked_server().base_url();
    let response = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "tiny", "messages": [{"role": "user", "content": "a"}], "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    assert_error_body(&response.json().await.unwrap(), "503");
}
