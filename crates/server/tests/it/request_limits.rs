//! Each request is bounded: too many prompts, choices, stop strings or stop ids, or JSON
//! nested too deep, is a 400 naming the limit; logprobs of 0 means no alternatives; the
//! `developer` and `tool` roles are understood.

use crate::common;

use common::*;
use serde_json::{json, Value};

async fn refused(path: &str, body: Value, param: Option<&str>, flag: &str) {
    let (status, reply) = post_json(path, body).await;
    assert_eq!(status, 400, "{reply}");
    let error = &reply["error"];
    assert_eq!(error["code"], "limit_exceeded", "{reply}");
    assert_eq!(error["param"].as_str(), param, "{reply}");
    assert!(
        error["message"].as_str().unwrap().contains(flag),
        "the message names {flag}: {reply}"
    );
}

#[tokio::test]
async fn each_request_limit_is_a_400_naming_the_limit() {
    crate::common::skip_without_model!();
    let chat = common::chat_body;
    let prompts: Vec<&str> = vec!["a"; 257];
    refused(
        "/v1/completions",
        json!({"prompt": prompts}),
        Some("prompt"),
        "--max-prompts-per-request",
    )
    .await;
    let token_prompts: Vec<Vec<u32>> = vec![vec![1]; 100_000];
    refused(
        "/v1/completions",
        json!({"prompt": token_prompts}),
        Some("prompt"),
        "--max-prompts-per-request",
    )
    .await;
    refused(
        "/v1/completions",
        json!({"prompt": vec!["a"; 20], "n": 16}),
        Some("n"),
        "--max-choices-per-request",
    )
    .await;
    refused(
        "/v1/completions",
        json!({"prompt": "a", "n": 17}),
        Some("n"),
        "--max-n",
    )
    .await;
    refused(
        "/v1/completions",
        json!({"prompt": "a", "stop": vec!["x"; 17]}),
        Some("stop"),
        "--max-stop-strings",
    )
    .await;
    refused(
        "/v1/chat/completions",
        chat(json!({"stop": "y".repeat(257)})),
        Some("stop"),
        "--max-stop-string-bytes",
    )
    .await;
    refused(
        "/v1/chat/completions",
        chat(json!({"stop_token_ids": vec![1; 257]})),
        Some("stop_token_ids"),
        "--max-stop-token-ids",
    )
    .await;
    let deep = format!(
        r#"{{"prompt": "a", "stream_options": {}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let response = client()
        .post(url("/v1/completions"))
        .header("content-type", "application/json")
        .body(deep)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let reply: Value = response.json().await.unwrap();
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-json-depth"),
        "{reply}"
    );
}

#[tokio::test]
async fn requests_at_the_limits_are_served() {
    crate::common::skip_without_model!();
    let (status, reply) = post_json(
        "/v1/completions",
        json!({"prompt": vec!["Hi"; 16], "n": 16, "max_tokens": 1, "stop": vec!["x"; 16], "stop_token_ids": vec![1; 256]}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"].as_array().unwrap().len(), 256);
}

#[tokio::test]
async fn logprobs_of_zero_report_the_chosen_token_and_no_alternatives() {
    crate::common::skip_without_model!();
    let (status, reply) = post_json(
        "/v1/completions",
        json!({"prompt": "Hello", "max_tokens": 3, "logprobs": 0, "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let logprobs = &reply["choices"][0]["logprobs"];
    assert_eq!(logprobs["token_logprobs"].as_array().unwrap().len(), 3);
    for top in logprobs["top_logprobs"].as_array().unwrap() {
        assert_eq!(top.as_object().unwrap().len(), 0, "{reply}");
    }
    let (status, reply) = post_json(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "logprobs": true, "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    for token in reply["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
    {
        assert!(token["logprob"].is_number());
        assert_eq!(
            token["top_logprobs"].as_array().unwrap().len(),
            0,
            "{reply}"
        );
    }
}

#[tokio::test]
async fn developer_messages_are_rendered_as_system_messages() {
    crate::common::skip_without_model!();
    let ask = |role: &str| json!({"messages": [{"role": role, "content": "Answer briefly."}, {"role": "user", "content": "Hi"}], "add_generation_prompt": true});
    let tokenize = |body: Value| async move {
        let response = client()
            .post(url("/tokenize"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()["tokens"].clone()
    };
    assert_eq!(
        tokenize(ask("developer")).await,
        tokenize(ask("system")).await
    );
    let (status, reply) = post_json(
        "/v1/chat/completions",
        json!({"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
}

#[tokio::test]
async fn tool_messages_reach_the_chat_template() {
    crate::common::skip_without_model!();
    let (status, reply) = post_json(
        "/v1/chat/completions",
        json!({"messages": [
            {"role": "user", "content": "What is the weather?"},
            {"role": "assistant", "content": "Let me check."},
            {"role": "tool", "content": "sunny"}
        ], "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
}

#[tokio::test]
async fn a_body_that_stops_arriving_gets_408_instead_of_holding_the_connection() {
    crate::common::skip_without_model!();
    use std::io::{Read, Write};
    use tokenmill_server::http::api_server::ServerOptions;
    use tokenmill_server::serving::request_limits::RequestLimits;

    let options = ServerOptions {
        request_limits: RequestLimits {
            request_body_timeout: 1,
            ..RequestLimits::default()
        },
        ..ServerOptions::default()
    };
    let answer = tokio::task::spawn_blocking(move || {
        let server = start_server(&[], options);
        let mut socket = std::net::TcpStream::connect(server.addr).unwrap();
        let head = "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                    content-length: 100\r\n\r\n{\"prompt\": ";
        socket.write_all(head.as_bytes()).unwrap();
        // Read until the error body is in (the server may keep the socket open after it).
        let mut answer = String::new();
        let mut buffer = [0u8; 4096];
        while !answer.contains("--request-body-timeout") {
            let n = socket.read(&mut buffer).unwrap();
            if n == 0 {
                break;
            }
            answer.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
        drop(socket);
        server.shutdown();
        answer
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--request-body-timeout"), "{answer}");
}
