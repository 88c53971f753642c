//! When the engine fails a step, clients get an OpenAI error (a 500, or an error object that
//! ends the stream before `[DONE]`), and `/health` tells the truth about the engine.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use common::*;
use serde_json::{json, Value};
use tokenmill_engine::core::engine_handle::MAX_CONSECUTIVE_STEP_FAILURES;
use tokenmill_engine::EngineError;
use tokenmill_server::http::api_server::{spawn_server, ServerHandle, ServerOptions};

/// A server whose engine runs `fault(step number)` before every forward pass.
fn server_with_fault(
    fault: impl Fn(u32) -> Result<(), EngineError> + Send + Sync + 'static,
) -> ServerHandle {
    let mut model = load_model(&[]);
    let calls = Arc::new(AtomicU32::new(0));
    model.engine.set_step_fault(Box::new(move |_| {
        fault(calls.fetch_add(1, Ordering::SeqCst))
    }));
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    spawn_server(model, ServerOptions::default(), addr).unwrap()
}

async fn complete(base: &str) -> (u16, Value) {
    let response = client()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "Hello", "max_tokens": 3, "ignore_eos": true}))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn health(base: &str) -> u16 {
    let response = client().get(format!("{base}/health")).send().await.unwrap();
    response.status().as_u16()
}

/// Every `data:` payload of a streamed completion, `[DONE]` included.
async fn stream_payloads(base: &str) -> Vec<String> {
    let mut response = client()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "Hello", "max_tokens": 3, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = SseReader::default();
    let mut payloads = Vec::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        payloads.extend(reader.feed(&bytes));
    }
    payloads
}

#[tokio::test]
async fn an_engine_whose_steps_keep_failing_answers_errors_and_reports_503_health() {
    crate::common::skip_without_model!();
    let server = server_with_fault(|step| {
        Err(EngineError::InvalidRequest(format!(
            "injected failure of step {step}"
        )))
    });
    let base = server.base_url();
    assert_eq!(health(&base).await, 200, "no step has failed yet");

    let (status, body) = complete(&base).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "engine_error");
    assert_eq!(body["error"]["type"], "server_error");

    let payloads = stream_payloads(&base).await;
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let error: Value = serde_json::from_str(&payloads[payloads.len() - 2]).unwrap();
    assert_eq!(error["error"]["code"], "engine_error", "{payloads:?}");

    for _ in 2..MAX_CONSECUTIVE_STEP_FAILURES {
        assert_eq!(complete(&base).await.0, 500);
    }
    let response = client().get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failing"),
        "{body}"
    );
}

#[tokio::test]
async fn a_panic_in_one_step_fails_only_that_request_and_the_server_stays_healthy() {
    crate::common::skip_without_model!();
    let server = server_with_fault(|step| {
        if step == 0 {
            panic!("injected panic in the first step");
        }
        Ok(())
    });
    let base = server.base_url();
    let (status, body) = complete(&base).await;
    assert_eq!(status, 500, "{body}");
    let (status, body) = complete(&base).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 3);
    assert_eq!(health(&base).await, 200);
}
