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

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    serve: tokenmill_server::http::api_server::ServeArgs,
}

/// The size cap's deletions reach a router: a subscriber on the real ZeroMQ interface
/// (`tests/kv_events_disk_subscriber.py`) rebuilds from the events with `medium` "DISK",
/// stored and removed, exactly the block files the capped directory holds.
#[test]
fn the_size_caps_deletions_are_announced_as_disk_block_removed_events() {
    use clap::Parser;
    crate::common::skip_without_model!();
    let dir = std::env::temp_dir().join(format!(
        "tokenmill-kv-offload-events-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_text = dir.to_string_lossy().into_owned();
    let config = r#"{"enable_kv_cache_events": true, "publisher": "zmq",
        "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0", "topic": "kv-events"}"#;
    // A few megabytes: some twenty blocks of the default model, less than the workload's.
    let flags = [
        "tokenmill",
        "--kv-offload-dir",
        &dir_text,
        "--kv-offload-max-gib",
        "0.006",
        "--kv-events-config",
        config,
    ];
    let args = Cli::try_parse_from(flags).expect("the flags parse").serve;
    let model = tokenmill_server::model::model_loader::load(&args.engine).expect("the model");
    let server = tokenmill_server::http::api_server::spawn_server(
        model,
        args.options(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .expect("starting the server");
    let base = server.base_url();
    let state: serde_json::Value = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async {
            let reply = reqwest::get(format!("{base}/debug/prefix_cache")).await?;
            reply.json().await
        })
        .expect("/debug/prefix_cache answers");
    let replay = state["kv_events"]["replay_endpoint"]
        .as_str()
        .expect("a replay endpoint");
    let port = replay.rsplit(':').next().expect("a port");
    let python = std::env::var("TOKENMILL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/kv_events_disk_subscriber.py"
    );
    let output = std::process::Command::new(&python)
        .args([script, &base, &format!("tcp://127.0.0.1:{port}"), &dir_text])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): set TOKENMILL_PYTHON"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    if output.status.code() == Some(3) {
        println!(
            "SKIPPED the disk-event subscriber check: {python} lacks pyzmq or msgpack \
             (scripts/test.sh installs them): {stderr}"
        );
        return;
    }
    assert!(
        output.status.success(),
        "kv_events_disk_subscriber.py failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    println!("subscriber: {stdout}");
}
