//! `tokenmill serve` with several models, through HTTP: each answers by its name, loads on
//! its first request, and `/v1/models` says which are loaded; `--models-max` swaps them,
//! `--sleep-idle-seconds` unloads an idle one, `/models/load` and `/models/unload` do as
//! asked and free the memory; an unknown name is OpenAI's 404, a broken file fails its own
//! requests only, and `--models-dir` names each file it holds; `--model-flags` gives a model
//! its own engine flags and `--models-memory-gib` unloads to stay within a budget. Most use the zoo's tiny Qwen3
//! under two names (every tier has it); the memory figures use the default model.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{model, skip_without_model, ServedBinary};

fn tiny() -> String {
    model::zoo("tiny-qwen3")
        .join("model-f32.gguf")
        .display()
        .to_string()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `method path` with an optional JSON body: the status and the JSON answer.
fn call(server: &ServedBinary, path: &str, body: Option<Value>) -> (u16, Value) {
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let url = format!("{}{path}", server.base_url);
        let request = match body {
            Some(body) => client.post(url).json(&body),
            None => client.get(url),
        };
        let response = request
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    })
}

fn complete(server: &ServedBinary, model: &str) -> (u16, Value) {
    call(
        server,
        "/v1/completions",
        Some(json!({"model": model, "prompt": "Hello", "max_tokens": 3, "temperature": 0})),
    )
}

/// Each model's `status.value` in `/v1/models`, by name, with the `loaded` flag checked
/// against it.
fn states(server: &ServedBinary) -> Vec<(String, String)> {
    let (status, list) = call(server, "/v1/models", None);
    assert_eq!(status, 200, "{list}");
    list["data"]
        .as_array()
        .expect("a list of models")
        .iter()
        .map(|m| {
            let state = m["status"]["value"].as_str().unwrap().to_owned();
            assert_eq!(m["loaded"], json!(state == "loaded"), "{m}");
            (m["id"].as_str().unwrap().to_owned(), state)
        })
        .collect()
}

fn state_of(server: &ServedBinary, name: &str) -> String {
    states(server)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name} is listed"))
        .1
}

fn two_tiny(extra: &[&str]) -> ServedBinary {
    let a = format!("a={}", tiny());
    let b = format!("b={}", tiny());
    let mut args = vec!["--model", &a, "--model", &b];
    args.extend_from_slice(extra);
    ServedBinary::start_with_env(&args, &[])
}

#[test]
fn two_models_both_answer_by_name_and_the_list_says_which_are_loaded() {
    // The tiny model has no chat template; the text flags apply to every model.
    let server = two_tiny(&[
        "--chat-template",
        "{% for m in messages %}{{ m.content }}{% endfor %}",
    ]);
    assert_eq!(
        states(&server),
        [
            ("a".into(), "unloaded".into()),
            ("b".into(), "unloaded".into())
        ]
    );
    let (status, reply) = complete(&server, "a");
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["model"], "a");
    assert_eq!(state_of(&server, "a"), "loaded");
    assert_eq!(state_of(&server, "b"), "unloaded");
    let (status, reply) = call(
        &server,
        "/v1/chat/completions",
        Some(
            json!({"model": "b", "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 3}),
        ),
    );
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["model"], "b");
    assert_eq!(
        states(&server),
        [("a".into(), "loaded".into()), ("b".into(), "loaded".into())]
    );
    // Each model's series, told apart by `model_name`, under one header per family.
    let (_, metrics) = call(&server, "/metrics", None);
    let metrics = metrics.as_str().expect("the exposition is text");
    for name in ["a", "b"] {
        assert!(
            metrics.contains(&format!(
                "tokenmill:num_requests_running{{model_name=\"{name}\"}}"
            )),
            "{metrics}"
        );
        assert!(
            metrics.contains(&format!(
                "tokenmill_model_loaded{{model_name=\"{name}\"}} 1"
            )),
            "{metrics}"
        );
    }
    assert_eq!(
        metrics
            .matches("# TYPE tokenmill:num_requests_running gauge")
            .count(),
        1
    );
}

#[test]
fn with_models_max_one_a_request_for_the_other_model_swaps_them() {
    let server = two_tiny(&["--models-max", "1"]);
    assert_eq!(complete(&server, "a").0, 200);
    assert_eq!(state_of(&server, "a"), "loaded");
    let (status, reply) = complete(&server, "b");
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        states(&server),
        [
            ("a".into(), "unloaded".into()),
            ("b".into(), "loaded".into())
        ]
    );
    // And back: the first model loads again on its next request.
    assert_eq!(complete(&server, "a").0, 200);
    assert_eq!(
        states(&server),
        [
            ("a".into(), "loaded".into()),
            ("b".into(), "unloaded".into())
        ]
    );
}

#[test]
fn load_and_unload_routes_load_and_unload_the_model_named() {
    let server = two_tiny(&[]);
    let (status, reply) = call(&server, "/models/load", Some(json!({"model": "b"})));
    assert_eq!((status, &reply), (200, &json!({"success": true})));
    assert_eq!(state_of(&server, "b"), "loaded");
    assert_eq!(state_of(&server, "a"), "unloaded");
    let (status, reply) = call(&server, "/models/unload", Some(json!({"model": "b"})));
    assert_eq!((status, &reply), (200, &json!({"success": true})));
    assert_eq!(state_of(&server, "b"), "unloaded");
    // Unloading what is not loaded is the client's error; a name not served is a 404.
    let (status, reply) = call(&server, "/models/unload", Some(json!({"model": "b"})));
    assert_eq!(status, 400, "{reply}");
    let (status, reply) = call(&server, "/models/load", Some(json!({"model": "nope"})));
    assert_eq!(status, 404, "{reply}");
    let (status, reply) = call(&server, "/models/load", Some(json!({})));
    assert_eq!(status, 400, "{reply}");
    // An unloaded model still answers: its request loads it again.
    assert_eq!(complete(&server, "b").0, 200);
}

/// A model's `max_model_len` in `/v1/models` (known once loaded).
fn max_model_len(server: &ServedBinary, name: &str) -> Value {
    let (_, list) = call(server, "/v1/models", None);
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == name)
        .unwrap_or_else(|| panic!("{name} is listed"))["max_model_len"]
        .clone()
}

#[test]
fn each_model_is_built_with_its_own_flags_over_the_serve_commands() {
    let server = two_tiny(&[
        "--max-model-len",
        "128",
        "--num-kv-blocks",
        "40",
        "--model-flags",
        "b=--max-model-len 64 --num-kv-blocks 30",
    ]);
    assert_eq!(complete(&server, "a").0, 200);
    assert_eq!(complete(&server, "b").0, 200);
    assert_eq!(max_model_len(&server, "a"), json!(128));
    assert_eq!(max_model_len(&server, "b"), json!(64));
    let (_, metrics) = call(&server, "/metrics", None);
    let metrics = metrics.as_str().expect("the exposition is text");
    for (name, blocks) in [("a", 40), ("b", 30)] {
        let series = format!("tokenmill:kv_cache_blocks{{model_name=\"{name}\"}} {blocks}\n");
        assert!(metrics.contains(&series), "{series}in\n{metrics}");
    }
    // Each model's own limit holds for its requests: 100 tokens more fit within a's 128,
    // and b stops its reply at its 64.
    for (name, total) in [("a", 104), ("b", 64)] {
        let body = json!({"model": name, "prompt": "Hello", "max_tokens": 100,
                          "ignore_eos": true, "temperature": 0});
        let (status, reply) = call(&server, "/v1/completions", Some(body));
        assert_eq!(status, 200, "{reply}");
        assert_eq!(
            reply["usage"]["total_tokens"],
            json!(total),
            "{name}: {reply}"
        );
    }
}

#[test]
fn a_memory_budget_unloads_the_least_recently_used_model_and_refuses_one_over_it_alone() {
    // Each tiny model counts as its 0.7 MB file plus 0.1 GiB of KV cache: one fits in
    // 0.15 GiB, two do not; `c` with 1 GiB of KV cache does not fit alone.
    let a = format!("a={}", tiny());
    let b = format!("b={}", tiny());
    let c = format!("c={}", tiny());
    let server = ServedBinary::start_with_env(
        &[
            "--model",
            &a,
            "--model",
            &b,
            "--model",
            &c,
            "--kv-cache-memory-gib",
            "0.1",
            "--models-memory-gib",
            "0.15",
            "--model-flags",
            "c=--kv-cache-memory-gib 1",
        ],
        &[],
    );
    assert_eq!(complete(&server, "a").0, 200);
    assert_eq!(state_of(&server, "a"), "loaded");
    assert_eq!(complete(&server, "b").0, 200);
    assert_eq!(
        states(&server),
        [
            ("a".into(), "unloaded".into()),
            ("b".into(), "loaded".into()),
            ("c".into(), "unloaded".into())
        ]
    );
    let (status, reply) = complete(&server, "c");
    assert_eq!(status, 503, "{reply}");
    assert_eq!(
        reply["error"]["code"], "model_over_memory_budget",
        "{reply}"
    );
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`c`") && message.contains("--models-memory-gib"),
        "{message}"
    );
    // Refused before anything was unloaded for it.
    assert_eq!(state_of(&server, "b"), "loaded");
}

#[test]
fn an_unknown_model_is_a_404_in_openais_error_shape() {
    let server = two_tiny(&[]);
    let (status, reply) = complete(&server, "gpt-4");
    assert_eq!(status, 404, "{reply}");
    let error = &reply["error"];
    assert_eq!(error["code"], "model_not_found", "{reply}");
    assert_eq!(error["type"], "invalid_request_error", "{reply}");
    assert_eq!(error["param"], "model", "{reply}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("gpt-4") && message.contains("`a`, `b`"),
        "{message}"
    );
    assert_eq!(
        states(&server),
        [
            ("a".into(), "unloaded".into()),
            ("b".into(), "unloaded".into())
        ]
    );
}

#[test]
fn a_model_whose_file_is_broken_fails_its_own_requests_and_the_other_keeps_serving() {
    let dir = TempDir::new("broken");
    let broken = dir.0.join("broken.gguf");
    std::fs::write(&broken, b"GGUF but not really a model file").unwrap();
    let good = format!("good={}", tiny());
    let bad = format!("bad={}", broken.display());
    let server = ServedBinary::start_with_env(&["--model", &good, "--model", &bad], &[]);
    let (status, reply) = complete(&server, "bad");
    assert_eq!(status, 500, "{reply}");
    assert_eq!(reply["error"]["code"], "model_load_failed", "{reply}");
    assert_eq!(state_of(&server, "bad"), "unloaded");
    assert_eq!(complete(&server, "good").0, 200);
    // Asked again, it fails again the same way; the server is still up.
    assert_eq!(complete(&server, "bad").0, 500);
    assert_eq!(call(&server, "/health", None).0, 200);
}

#[test]
fn models_dir_serves_each_gguf_file_by_its_stem() {
    let dir = TempDir::new("dir");
    for name in ["first", "second"] {
        std::os::unix::fs::symlink(tiny(), dir.0.join(format!("{name}.gguf"))).unwrap();
    }
    std::fs::write(dir.0.join("README.txt"), "not a model").unwrap();
    let models_dir = dir.0.display().to_string();
    let server = ServedBinary::start_with_env(&["--models-dir", &models_dir], &[]);
    assert_eq!(
        states(&server),
        [
            ("first".into(), "unloaded".into()),
            ("second".into(), "unloaded".into())
        ]
    );
    let (status, reply) = complete(&server, "second");
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["model"], "second");
}

#[test]
fn a_model_idle_past_sleep_idle_seconds_is_unloaded() {
    let server = two_tiny(&["--sleep-idle-seconds", "1"]);
    assert_eq!(complete(&server, "a").0, 200);
    let deadline = Instant::now() + Duration::from_secs(60);
    while state_of(&server, "a") == "loaded" {
        assert!(
            Instant::now() < deadline,
            "a is still loaded a minute after its last request"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(state_of(&server, "a"), "unloaded");
    assert_eq!(complete(&server, "a").0, 200);
}

/// Resident memory of `pid` in KiB (`VmRSS` of `/proc/PID/status`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

#[test]
fn unloading_the_default_model_gives_its_memory_back() {
    skip_without_model!();
    let default = format!("default={}", model::path().display());
    let other = format!("tiny={}", tiny());
    let server = ServedBinary::start_with_env(
        &[
            "--model",
            &default,
            "--model",
            &other,
            "--kv-cache-memory-gib",
            "0.25",
        ],
        &[],
    );
    let before = rss_kib(server.pid());
    assert_eq!(complete(&server, "default").0, 200);
    // The engine backs its KV pool while idle in its first seconds: let it.
    std::thread::sleep(Duration::from_secs(3));
    let loaded = rss_kib(server.pid());
    let (status, reply) = call(&server, "/models/unload", Some(json!({"model": "default"})));
    assert_eq!(status, 200, "{reply}");
    let unloaded = rss_kib(server.pid());
    eprintln!(
        "resident memory: {} MiB before loading, {} MiB loaded, {} MiB unloaded",
        before / 1024,
        loaded / 1024,
        unloaded / 1024
    );
    // The model's weights alone are ~90 MiB; its KV pool 256 MiB once backed.
    assert!(
        loaded > before + 64 * 1024,
        "loading took {} KiB",
        loaded - before
    );
    // Weights, KV pool and the heap used while loading all go back (glibc's arenas trimmed).
    let took = loaded - before;
    assert!(
        unloaded < before + took / 4,
        "unloading gave back only {} of the {took} KiB loading took",
        loaded.saturating_sub(unloaded)
    );
}

/// A folder of its own under the system's temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "tokenmill-several-models-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(Path::new(&self.0));
    }
}
