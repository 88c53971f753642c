//! With `--api-key` set, generation and tokenizing want `Authorization: Bearer <key>`: a
//! missing or wrong key gets a 401 in the OpenAI error shape, the right key is served, and the
//! probes' routes (`/health`, `/version`, `/metrics`) stay open.

use crate::common;

use std::sync::OnceLock;

use common::start_server;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};

const KEY: &str = "sesame";

fn keyed_server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        let options = ServerOptions {
            api_key: Some(KEY.into()),
            ..ServerOptions::default()
        };
        start_server(&[], options)
    })
}

/// The routes that cost work, each with a body it serves.
fn guarded_routes() -> [(&'static str, Value); 4] {
    [
        ("/v1/completions", json!({"prompt": "a", "max_tokens": 1})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "max_tokens": 1}),
        ),
        ("/tokenize", json!({"prompt": "Hello world"})),
        ("/detokenize", json!({"tokens": [1, 2, 3]})),
    ]
}

/// The keyed server's base URL; started off the async workers, as loading the model blocks.
async fn base_url() -> String {
    tokio::task::spawn_blocking(|| keyed_server().base_url())
        .await
        .unwrap()
}

async fn get(path: &str, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!("{}{path}", base_url().await));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

async fn post(path: &str, body: &Value, authorization: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", base_url().await))
        .json(body);
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn a_missing_or_wrong_key_gets_a_401_error_body_on_every_guarded_route() {
    crate::common::skip_without_model!();
    let wrong = [
        None,
        Some("Bearer wrong"),
        Some("Bearer sesam"),
        Some("Bearer sesamee"),
        Some("sesame"),
        Some("Basic sesame"),
    ];
    for (path, body) in guarded_routes() {
        for authorization in wrong {
            let (status, reply) = post(path, &body, authorization).await;
            assert_eq!(status, 401, "{path} {authorization:?}: {reply}");
            let error = &reply["error"];
            assert_eq!(error["code"], "invalid_api_key", "{path}: {reply}");
            assert_eq!(error["type"], "invalid_request_error", "{path}: {reply}");
            assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
            assert!(error.get("param").is_some(), "{path}: {reply}");
        }
    }
    let models = get("/v1/models", None).await;
    assert_eq!(models.status(), 401);
}

#[tokio::test]
async fn the_right_key_is_served_on_every_guarded_route() {
    crate::common::skip_without_model!();
    for (path, body) in guarded_routes() {
        let (status, reply) = post(path, &body, Some(&format!("Bearer {KEY}"))).await;
        assert_eq!(status, 200, "{path}: {reply}");
        assert!(reply.get("error").is_none(), "{path}: {reply}");
    }
    let models = get("/v1/models", Some(KEY)).await;
    assert_eq!(models.status(), 200);
}

#[tokio::test]
async fn health_version_and_metrics_answer_without_the_key() {
    crate::common::skip_without_model!();
    for path in ["/health", "/version", "/metrics"] {
        let response = get(path, None).await;
        assert_eq!(response.status(), 200, "{path}");
    }
}
