//! The disk tier over HTTP: a server restarted on the same `--kv-offload-dir` answers a long
//! prompt as the first (cold) server did, and `/metrics` counts its prefill's blocks as
//! hits from disk (vLLM's external prefix cache counters).

use crate::common::{metric, metrics_text, post_json_to, start_server};
use serde_json::json;
use tokenmill_server::http::api_server::ServerOptions;

/// Starts a server on `dir`, sends `body` to /v1/completions, returns the reply and the
/// server's disk-hit counter, then stops the server (which flushes the tier's writer).
async fn serve_once(dir: &str, body: serde_json::Value) -> (serde_json::Value, f64) {
    let flags = ["--kv-offload-dir".to_owned(), dir.to_owned()];
    let server = tokio::task::spawn_blocking(move || {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        start_server(&flags, ServerOptions::default())
    })
    .await
    .unwrap();
    let base = server.base_url();
    let (status, reply) = post_json_to(&base, "/v1/completions", body).await;
    assert!(status.is_success(), "{reply}");
    let hits = metric(
        &metrics_text(&base).await,
        "tokenmill:external_prefix_cache_hits_total",
    );
    tokio::task::spawn_blocking(move || server.shutdown())
        .await
        .unwrap();
    (reply, hits)
}

#[tokio::test]
async fn a_restarted_server_answers_a_long_prompt_from_disk_as_the_cold_one_did() {
    crate::common::skip_without_model!();
    let dir =
        std::env::temp_dir().join(format!("tokenmill-kv-offload-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_text = dir.to_string_lossy().into_owned();
    let sentence = "The quick brown fox jumps over the lazy dog near the quiet river bank. ";
    let body = json!({
        "prompt": sentence.repeat(75),
        "max_tokens": 16,
        "temperature": 0,
        "ignore_eos": true,
    });
    let (cold, cold_hits) = serve_once(&dir_text, body.clone()).await;
    assert_eq!(cold_hits, 0.0);
    let prompt_tokens = cold["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens >= 1_000, "{prompt_tokens} prompt tokens");
    let (warm, warm_hits) = serve_once(&dir_text, body).await;
    assert_eq!(warm["choices"][0]["text"], cold["choices"][0]["text"]);
    assert_eq!(warm_hits, ((prompt_tokens - 1) / 16 * 16) as f64);
    let _ = std::fs::remove_dir_all(&dir);
}
