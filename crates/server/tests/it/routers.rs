//! SGLang's router (`sglang-router` from PyPI, a real process) and then vLLM's
//! (`vllm-router`) in front of two servers: every request through either succeeds, streamed
//! and not, completions and chat, with the reply a lone server gives, and SGLang's registers
//! both servers under the served model's name.
//!
//! Runs the routers with the Python in `TOKENMILL_PYTHON` (default `python3`), which
//! `scripts/test.sh` gives both packages; where one is not installed its test prints a
//! SKIPPED line and passes.

use crate::common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

/// The router process, killed when the test ends however it ends.
struct Router {
    child: Child,
    base: String,
    ready: &'static str,
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// How one router is started and asked whether it is ready.
struct RouterKind {
    package: &'static str,
    module: &'static str,
    /// 200 once the router serves (sglang-router's also counts the healthy workers).
    ready: &'static str,
    log_level: &'static str,
}

const SGLANG: RouterKind = RouterKind {
    package: "sglang-router",
    module: "sglang_router",
    ready: "/readiness",
    log_level: "warn",
};

const VLLM: RouterKind = RouterKind {
    package: "vllm-router",
    module: "vllm_router",
    ready: "/health",
    log_level: "warning",
};

fn start_router(kind: &RouterKind, python: &str, workers: &[String]) -> Router {
    let port = free_port();
    let launcher = format!("{}.launch_router", kind.module);
    let mut command = Command::new(python);
    command
        .args(["-m", &launcher, "--host", "127.0.0.1"])
        .args(["--port", &port.to_string(), "--policy", "round_robin"])
        // Each its own metrics port: both routers default to 29000, and the tests run at once.
        .args(["--prometheus-port", &free_port().to_string()])
        .args(["--log-level", kind.log_level, "--worker-urls"])
        .args(workers)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let child = command.spawn().expect("starting the router");
    Router {
        child,
        base: format!("http://127.0.0.1:{port}"),
        ready: kind.ready,
    }
}

/// Until the router reports both workers healthy.
async fn wait_ready(router: &mut Router) {
    let started = Instant::now();
    loop {
        if let Some(status) = router.child.try_wait().unwrap() {
            panic!("the router exited early: {status}");
        }
        let ready = client()
            .get(format!("{}{}", router.base, router.ready))
            .send()
            .await;
        if let Ok(response) = ready {
            if response.status() == 200 {
                let body: Value = response.json().await.unwrap_or_default();
                if body["healthy_workers"].as_u64().unwrap_or(2) >= 2 {
                    return;
                }
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the router did not become ready with both workers"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn post(url: String, body: &Value) -> Value {
    let response = client().post(&url).json(body).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "{url}: {text:.400}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url} answered non-JSON ({e}): {text}"))
}

async fn stream(url: String, body: &Value) -> Vec<Value> {
    let response = client().post(&url).json(body).send().await.unwrap();
    assert_eq!(response.status(), 200, "{url}");
    read_stream(response).await
}

async fn finished_requests(base: &str) -> f64 {
    let text = metrics_text(base).await;
    ["stop", "length"]
        .iter()
        .map(|reason| {
            let series = format!(
                "tokenmill:request_success_total{{model_name=\"{MODEL}\",finished_reason=\"{reason}\"}}"
            );
            metric(&text, &series)
        })
        .sum()
}

/// The router's Python, or `None` (with a SKIPPED line) where its package is missing.
fn router_python(kind: &RouterKind) -> Option<String> {
    let python = std::env::var("TOKENMILL_PYTHON").unwrap_or_else(|_| "python3".into());
    let installed = Command::new(&python)
        .args(["-c", &format!("import {}", kind.module)])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Some(python);
    }
    common::model::say_skipped(&format!(
        "{} is not installed for {python} (scripts/test.sh installs it)",
        kind.package
    ));
    None
}

/// Two servers behind the router; every shape of request through it gets a lone server's
/// reply, and both servers take their share. Returns the router for further checks.
async fn through_router(kind: &RouterKind, python: &str) -> (Router, [ServerHandle; 2]) {
    let servers = [
        start_server(&[], ServerOptions::default()),
        start_server(&[], ServerOptions::default()),
    ];
    let workers: Vec<String> = servers.iter().map(|s| s.base_url()).collect();
    let mut router = start_router(kind, python, &workers);
    wait_ready(&mut router).await;
    let base = router.base.clone();

    let prompt = "The capital of France is";
    let expected = reference().completion(prompt, greedy(8)).text;
    let expected_chat = reference().chat("Name a fruit.", greedy(8)).text;
    let completion = json!({"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0});
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "Name a fruit."}],
                      "max_tokens": 8, "temperature": 0});
    // Twice round the two workers, so each serves each shape.
    for _ in 0..2 {
        let reply = post(format!("{base}/v1/completions"), &completion).await;
        assert_eq!(reply["choices"][0]["text"], expected);
        let mut streamed = completion.clone();
        streamed["stream"] = json!(true);
        let chunks = stream(format!("{base}/v1/completions"), &streamed).await;
        assert_eq!(streamed_text(&chunks, 0), expected);
        let reply = post(format!("{base}/v1/chat/completions"), &chat).await;
        assert_eq!(reply["choices"][0]["message"]["content"], expected_chat);
        let mut streamed = chat.clone();
        streamed["stream"] = json!(true);
        let chunks = stream(format!("{base}/v1/chat/completions"), &streamed).await;
        assert_eq!(streamed_text(&chunks, 0), expected_chat);
    }
    for worker in &workers {
        let served = finished_requests(worker).await;
        assert!(served >= 4.0, "{worker} served {served} of the 8 requests");
    }
    (router, servers)
}

#[tokio::test]
async fn requests_through_sglang_router_to_two_servers_all_succeed() {
    let Some(python) = router_python(&SGLANG) else {
        return;
    };
    let (router, _servers) = through_router(&SGLANG, &python).await;
    // The router registered each worker under the served name, read from /server_info
    // (without it, the model id is `unknown`).
    let listed = client()
        .get(format!("{}/workers", router.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        listed.matches(&format!("\"model_id\":\"{MODEL}\"")).count(),
        2,
        "{listed}"
    );
}

#[tokio::test]
async fn requests_through_vllm_router_to_two_servers_all_succeed() {
    let Some(python) = router_python(&VLLM) else {
        return;
    };
    through_router(&VLLM, &python).await;
}
