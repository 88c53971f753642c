//! `bench serve` against the real server started with `--api-key`: the key given with
//! `--api-key` or in `OPENAI_API_KEY` is sent as a bearer token and every request is served;
//! without it the benchmark stops at the server's 401.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

const KEY: &str = "open-sesame";

/// The binary serving the default model on a free port with [`KEY`]; killed on drop.
struct KeyedServer {
    child: Child,
    base_url: String,
}

impl KeyedServer {
    fn start() -> Self {
        let model = tokenmill_server::model_loader::default_model_path();
        assert!(
            model.exists(),
            "the default model {} is missing: run scripts/fetch-model.sh",
            model.display()
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
            .args(["serve", "--port", "0", "--num-kv-blocks", "256"])
            .args(["--api-key", KEY])
            .arg("--model")
            .arg(&model)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let stderr = child.stderr.take().unwrap();
        let (addr_tx, addr_rx) = mpsc::channel();
        // Drains the log to its end, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or_default();
                    let _ = addr_tx.send(format!("http://{addr}"));
                }
            }
        });
        let base_url = addr_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the server logs the address it listens on");
        Self { child, base_url }
    }
}

impl Drop for KeyedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A two-request `bench serve` run; `key_flag` and `key_env` are the two ways to pass a key.
fn bench(
    server: &KeyedServer,
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
    let server = KeyedServer::start();
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
