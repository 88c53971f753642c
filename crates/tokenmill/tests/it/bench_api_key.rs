//! `bench serve` against the real server started with `--api-key`: the key given with
//! `--api-key` or in `OPENAI_API_KEY` is sent as a bearer token and every request is served;
//! without it the benchmark stops at the server's 401.

use crate::common;

use std::process::{Command, Output, Stdio};

use common::ServedBinary;
use serde_json::Value;

const KEY: &str = "open-sesame";

/// A two-request `bench serve` run; `key_flag` and `key_env` are the two ways to pass a key.
fn bench(
    server: &ServedBinary,
    key_flag: Option<&str>,
    key_env: Option<&str>,
    result: &std::path::Path,
) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tokenmill"));
    command
        .args(["bench", "serve", "--base-url", &server.base_url])
        .args([
            "--num-prompts",
            "2",
            "--input-len",
            "8",
            "--output-len",
            "4",
        ])
        .args(["--no-progress-bar", "--save-result"])
        .arg(result)
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null());
    if let Some(key) = key_flag {
        command.args(["--api-key", key]);
    }
    if let Some(key) = key_env {
        command.env("OPENAI_API_KEY", key);
    }
    command.output().expect("the binary runs")
}

fn completed(result: &std::path::Path) -> (u64, u64) {
    let saved: Value = serde_json::from_slice(&std::fs::read(result).unwrap()).unwrap();
    (
        saved["completed"].as_u64().unwrap(),
        saved["failed"].as_u64().unwrap(),
    )
}

#[test]
fn bench_serve_sends_the_api_key_from_the_flag_or_the_environment() {
    crate::common::skip_without_model!();
    let server = ServedBinary::start(&["--num-kv-blocks", "256", "--api-key", KEY]);
    let dir = std::env::temp_dir().join(format!("tokenmill-bench-api-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    for (how, flag, env) in [("flag", Some(KEY), None), ("env", None, Some(KEY))] {
        let result = dir.join(format!("{how}.json"));
        let output = bench(&server, flag, env, &result);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "key by {how}: {stderr}");
        assert_eq!(completed(&result), (2, 0), "key by {how}: {stderr}");
    }

    let output = bench(&server, None, None, &dir.join("none.json"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "served without the key: {stderr}");
    assert!(stderr.contains("401"), "{stderr}");

    let output = bench(&server, Some("wrong"), None, &dir.join("wrong.json"));
    assert!(!output.status.success());
    std::fs::remove_dir_all(&dir).ok();
}
