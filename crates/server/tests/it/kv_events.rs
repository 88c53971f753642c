//! `--kv-events-config`: the real server publishes its KV-cache events over ZeroMQ as vLLM
//! does, and a subscriber written against pyzmq and msgpack alone
//! (`tests/kv_events_subscriber.py`) decodes every batch, live and through the replay socket,
//! and rebuilds exactly the block set `/debug/prefix_cache` reports, through prefix reuse and
//! eviction. Bad configurations stop the server at startup with a clear message.
//!
//! The subscriber runs with the Python in `TOKENMILL_PYTHON` (default `python3`);
//! `scripts/test.sh` installs `pyzmq` and `msgpack` there, and the test is SKIPPED (said so
//! on stdout) only where they could not be installed.

use std::process::Command;

use clap::Parser;
use tokenmill_server::http::api_server::{spawn_server, ServeArgs};
use tokenmill_server::kv_events::kv_events_config::EventEncoding;
use tokenmill_server::model::model_loader;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn parse(flags: &[&str]) -> Result<ServeArgs, String> {
    Cli::try_parse_from(std::iter::once("tokenmill").chain(flags.iter().copied()))
        .map(|cli| cli.serve)
        .map_err(|e| e.to_string())
}

#[test]
fn a_subscriber_rebuilds_the_servers_block_set_from_the_events_and_the_replay() {
    crate::common::skip_without_model!();
    // 48 blocks of 16 tokens: the workload's prompts do not all fit, so blocks are evicted.
    let config = r#"{"enable_kv_cache_events": true, "publisher": "zmq",
        "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0", "topic": "kv-events"}"#;
    let args =
        parse(&["--num-kv-blocks", "48", "--kv-events-config", config]).expect("the flags parse");
    let model = model_loader::load(&args.engine).expect("loading the default model");
    let server = spawn_server(model, args.options(), "127.0.0.1:0".parse().unwrap())
        .expect("starting the server");
    let base = server.base_url();
    let state: serde_json::Value = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async {
            let reply = reqwest::get(format!("{base}/debug/prefix_cache")).await?;
            reply.json().await
        })
        .expect("/debug/prefix_cache answers");
    assert_eq!(
        state["block_hashes"],
        serde_json::json!([]),
        "a fresh server caches nothing"
    );
    let events = &state["kv_events"];
    // Bound to the wildcard address; the subscriber connects over loopback.
    let loopback = |endpoint: &serde_json::Value| {
        let endpoint = endpoint.as_str().expect("an endpoint");
        let port = endpoint.rsplit(':').next().expect("a port");
        format!("tcp://127.0.0.1:{port}")
    };
    let python = std::env::var("TOKENMILL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kv_events_subscriber.py");
    let output = Command::new(&python)
        .args([
            script,
            &base,
            &loopback(&events["endpoint"]),
            &loopback(&events["replay_endpoint"]),
            "kv-events",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): set TOKENMILL_PYTHON"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(3) {
        println!(
            "SKIPPED the KV-event subscriber check: {python} lacks pyzmq or msgpack \
             (scripts/test.sh installs them): {stderr}"
        );
        return;
    }
    assert!(
        output.status.success(),
        "kv_events_subscriber.py failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    println!("subscriber: {stdout}");
    server.shutdown();
}

#[test]
fn bad_configurations_are_refused_at_startup_by_name() {
    let refused = |json: &str, needle: &str| {
        let error = parse(&["--kv-events-config", json]).expect_err(json);
        assert!(
            error.contains("--kv-events-config") && error.contains(needle),
            "{json}: {error}"
        );
    };
    refused("{not json", "key must be a string");
    refused(
        r#"{"enable_kv_cache_events": true, "publisher": "kafka"}"#,
        "unknown publisher \"kafka\"",
    );
    refused(
        r#"{"enable_kv_cache_events": true, "endpont": "x"}"#,
        "endpont",
    );
    refused(
        r#"{"enable_kv_cache_events": true, "endpoint": "ipc:///tmp/kv"}"#,
        "only the tcp transport",
    );
    refused(r#"{"enable_kv_cache_events": true, "hwm": 10}"#, "hwm 10");
    refused(
        r#"{"enable_kv_cache_events": true, "buffer_steps": -1}"#,
        "buffer_steps",
    );
    // vLLM's defaults fill what is left out; the publisher follows the switch.
    let on = parse(&["--kv-events-config", r#"{"enable_kv_cache_events": true}"#]).unwrap();
    let on = on.kv_events_config.unwrap();
    assert!(on.publishes());
    assert_eq!(on.endpoint, "tcp://*:5557");
    assert_eq!(on.publisher.as_deref(), Some("zmq"));
    let off = parse(&["--kv-events-config", "{}"]).unwrap();
    assert!(!off.kv_events_config.unwrap().publishes());
    // tokenmill's own key: vLLM's array form unless the map form (for vllm-router) is asked.
    assert_eq!(on.event_encoding, EventEncoding::Array);
    let map = parse(&[
        "--kv-events-config",
        r#"{"enable_kv_cache_events": true, "event_encoding": "map"}"#,
    ])
    .unwrap();
    assert_eq!(
        map.kv_events_config.unwrap().event_encoding,
        EventEncoding::Map
    );
    refused(
        r#"{"enable_kv_cache_events": true, "event_encoding": "yaml"}"#,
        "yaml",
    );
}
