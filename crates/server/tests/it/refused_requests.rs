//! Requests refused before any generation — bad input (400), over a limit (400), without the
//! API key (401), an unknown model (404), a body too large (413), an overloaded queue (503) —
//! are counted in `/metrics` as `tokenmill:requests_refused_total{reason=...}`; served
//! requests and `/health` polls are not.

use crate::common;

use common::{metrics_text, start_server};
use serde_json::{json, Value};
use tokenmill_server::http::api_server::ServerOptions;
use tokenmill_server::serving::request_limits::RequestLimits;

const KEY: &str = "secret";

/// Every reason's count, read from one exposition.
fn refusals(exposition: &str) -> Vec<(String, f64)> {
    exposition
        .lines()
        .filter(|l| l.starts_with("tokenmill:requests_refused_total{"))
        .map(|l| {
            let reason = l
                .split("reason=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let value = l.rsplit_once(' ').unwrap().1.parse().unwrap();
            (reason.to_owned(), value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_request_is_counted_by_reason_and_nothing_else_is() {
    crate::common::skip_without_model!();
    let options = ServerOptions {
        api_key: Some(KEY.into()),
        request_limits: RequestLimits {
            max_request_body_bytes: 4096,
            ..RequestLimits::default()
        },
        ..ServerOptions::default()
    };
    // A queue of two: a request with three prompts is refused as overloaded at once.
    let server =
        tokio::task::spawn_blocking(move || start_server(&["--max-waiting", "2"], options))
            .await
            .unwrap();
    let base = server.base_url();
    let client = reqwest::Client::new();
    let metrics = || async {
        let text = metrics_text(&base).await;
        refusals(&text)
    };
    let before = metrics().await;
    assert_eq!(before.len(), 10, "every reason is exported: {before:?}");
    assert!(before.iter().all(|(_, n)| *n == 0.0), "{before:?}");

    let post = |body: Value, key: Option<&str>| {
        let mut request = client.post(format!("{base}/v1/completions")).json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let cases: [(&str, Value, Option<&str>, u16); 7] = [
        ("unauthorized", json!({"prompt": "a"}), None, 401),
        ("unauthorized", json!({"prompt": "a"}), Some("wrong"), 401),
        (
            "invalid_request",
            json!({"prompt": "a", "temperature": "hot"}),
            Some(KEY),
            400,
        ),
        (
            "limit_exceeded",
            json!({"prompt": "a", "n": 1000}),
            Some(KEY),
            400,
        ),
        (
            "model_not_found",
            json!({"prompt": "a", "model": "gpt-9"}),
            Some(KEY),
            404,
        ),
        (
            "too_large",
            json!({"prompt": "a".repeat(5000)}),
            Some(KEY),
            413,
        ),
        (
            "overloaded",
            json!({"prompt": ["a", "b", "c"], "max_tokens": 1}),
            Some(KEY),
            503,
        ),
    ];
    for (reason, body, key, status) in &cases {
        assert_eq!(post(body.clone(), *key).await, *status, "{reason}: {body}");
    }
    // Neither a served request nor a health check is a refusal.
    assert_eq!(
        post(json!({"prompt": "a", "max_tokens": 1}), Some(KEY)).await,
        200
    );
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let after = metrics().await;
    for (reason, count) in &after {
        let expected = cases.iter().filter(|(r, ..)| r == reason).count() as f64;
        assert_eq!(*count, expected, "reason {reason}: {after:?}");
    }
    drop(client);
    tokio::task::spawn_blocking(move || server.shutdown())
        .await
        .unwrap();
}
