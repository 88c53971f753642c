//! `tokenmill serve --model org/repo[:QUANT]` against a local Hub (`common::local_hub`): the
//! model is fetched into the Hugging Face cache `HF_HOME` names, served, found there again
//! without a download, served offline, shared with the official `huggingface_hub` client both
//! ways; a corrupt file is refused and not kept, a cut transfer resumes, and no network or an
//! empty offline cache is one line naming the repository and the cache.

use crate::common::local_hub::LocalHub;
use crate::common::python_client::{run_client_script, Package};
use crate::common::{model, skip_without_model, ServedBinary};
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TINY: &str = "tokenmill-test/tiny-qwen3";
const GGUF_REPO: &str = "tokenmill-test/SmolLM2-135M-Instruct-GGUF";
const Q4_1: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Nothing listens here: a Hub that cannot be reached.
const DEAD_ENDPOINT: &str = "http://127.0.0.1:9";

/// A folder removed on drop, standing in for `HF_HOME`.
struct TempHome(PathBuf);

impl TempHome {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("tokenmill-hub-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn cache(&self) -> PathBuf {
        self.0.join("hub")
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The variables a run sees: this Hub, this home, nothing inherited that would change them
/// (an empty value reads as unset).
fn hub_env<'a>(endpoint: &'a str, home: &'a TempHome, offline: bool) -> Vec<(&'a str, &'a OsStr)> {
    vec![
        ("HF_ENDPOINT", OsStr::new(endpoint)),
        ("HF_HOME", home.0.as_os_str()),
        ("HF_HUB_CACHE", OsStr::new("")),
        ("HF_TOKEN", OsStr::new("")),
        (
            "HF_HUB_OFFLINE",
            OsStr::new(if offline { "1" } else { "0" }),
        ),
    ]
}

fn tiny_hub() -> LocalHub {
    LocalHub::builder()
        .folder_repo(TINY, &model::zoo("tiny-qwen3"))
        .start()
}

/// A completion from the served model, by the name clients use for it.
fn complete(server: &ServedBinary, name: &str) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = format!("{}/v1/completions", server.base_url);
    let body = json!({"model": name, "prompt": "Hello", "max_tokens": 4, "temperature": 0,
                      "ignore_eos": true, "logprobs": 1});
    let reply: Value = runtime.block_on(async {
        let response = reqwest::Client::new()
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    });
    assert_eq!(reply["model"], name, "{reply}");
    assert!(reply["choices"][0]["text"].is_string(), "{reply}");
    assert_eq!(reply["usage"]["completion_tokens"], 4, "{reply}");
    reply
}

/// `tokenmill serve` that must fail: its exit code and stderr.
fn serve_failure(args: &[&str], env: &[(&str, &OsStr)]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tokenmill"));
    command
        .args(["serve", "--port", "0"])
        .args(args)
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("the binary runs");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("tokenmill serve {args:?} did not stop: it was expected to fail");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code(), reader.join().unwrap())
}

/// Exit status 1 and stderr only the error, one line holding each of `expected`.
fn assert_one_error_line(code: Option<i32>, stderr: &str, expected: &[&str]) {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "more than one line:\n{stderr}");
    assert_error_line(code, stderr, expected);
}

/// Exit status 1 and, after any progress lines, one error line holding each of `expected`.
fn assert_error_line(code: Option<i32>, stderr: &str, expected: &[&str]) {
    assert_eq!(code, Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert_eq!(stderr.lines().last(), Some(errors[0]), "{stderr}");
    for part in expected {
        assert!(errors[0].contains(part), "no {part:?} in: {stderr}");
    }
}

fn snapshot(home: &TempHome, repo: &str, commit: &str) -> PathBuf {
    home.cache()
        .join(format!("models--{}", repo.replace('/', "--")))
        .join("snapshots")
        .join(commit)
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[test]
fn a_safetensors_repo_is_fetched_once_then_served_from_the_cache_and_offline() {
    let hub = tiny_hub();
    let home = TempHome::new("safetensors");
    let env = hub_env(&hub.endpoint, &home, false);
    let server = ServedBinary::start_with_env(&["--model", TINY], &env);
    complete(&server, TINY);
    drop(server);
    // Its config, text files and weights; not the repository's GGUF or reference data.
    assert_eq!(
        sorted(hub.downloaded()),
        [
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    let commit = hub.commit(TINY);
    let refs = home.cache().join("models--tokenmill-test--tiny-qwen3/refs");
    assert_eq!(std::fs::read_to_string(refs.join("main")).unwrap(), commit);
    assert!(
        !refs.join(&commit).exists(),
        "no ref named by the commit, as Python's cache"
    );

    hub.clear_requests();
    let server = ServedBinary::start_with_env(&["--model", TINY], &env);
    complete(&server, TINY);
    drop(server);
    assert_eq!(
        hub.downloaded(),
        Vec::<String>::new(),
        "{:?}",
        hub.requests()
    );

    hub.clear_requests();
    let offline = hub_env(DEAD_ENDPOINT, &home, true);
    let server = ServedBinary::start_with_env(&["--model", TINY], &offline);
    complete(&server, TINY);
    drop(server);
    assert!(hub.requests().is_empty());
}

#[test]
fn a_gguf_repo_by_quantization_is_fetched_with_progress_lines_then_reused() {
    skip_without_model!();
    let decoy = model::zoo("tiny-llama3").join("model-f32.gguf");
    let hub = LocalHub::builder()
        .repo(
            GGUF_REPO,
            &[
                ("README.md", model::zoo("tiny-llama3").join("config.json")),
                (Q4_1, model::path()),
                ("SmolLM2-135M-Instruct.Q8_0.gguf", decoy),
            ],
        )
        .start();
    let home = TempHome::new("gguf");
    let name = format!("{GGUF_REPO}:Q4_1");
    let env = hub_env(&hub.endpoint, &home, false);
    let server = ServedBinary::start_with_env(&["--model", &name], &env);
    complete(&server, &name);
    let log = server.log.lock().unwrap().join("\n");
    drop(server);
    assert_eq!(hub.downloaded(), [Q4_1]);
    // Not a terminal: log lines, not a bar.
    assert!(log.contains(&format!("downloading {Q4_1}")), "{log}");
    assert!(log.contains(&format!("{Q4_1}: 50%")), "{log}");
    assert!(log.contains(&format!("downloaded {Q4_1}")), "{log}");
    let cached = snapshot(&home, GGUF_REPO, &hub.commit(GGUF_REPO)).join(Q4_1);
    assert_eq!(
        std::fs::read_link(&cached).unwrap(),
        Path::new("../../blobs").join(hub.sha256(GGUF_REPO, Q4_1))
    );

    hub.clear_requests();
    let server = ServedBinary::start_with_env(&["--model", &name], &env);
    complete(&server, &name);
    drop(server);
    assert_eq!(hub.downloaded(), Vec::<String>::new());
    assert_eq!(
        hub.requests().len(),
        1,
        "only the listing: {:?}",
        hub.requests()
    );

    let offline = hub_env(DEAD_ENDPOINT, &home, true);
    let server = ServedBinary::start_with_env(&["--model", &name], &offline);
    complete(&server, &name);
}

/// `src`'s checkpoint in `dst` with its weights split in two shards and an index, as
/// `save_pretrained` writes a large model: each shard a safetensors file of its own tensors.
fn write_sharded_copy(src: &Path, dst: &Path) {
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(name), dst.join(name)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Value> =
        serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let data = &bytes[8 + header_len..];
    let mut names: Vec<&String> = header.keys().filter(|k| *k != "__metadata__").collect();
    names.sort();
    let half = names.len() / 2;
    let mut weight_map = serde_json::Map::new();
    for (shard, part) in [&names[..half], &names[half..]].iter().enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", shard + 1);
        let (mut meta, mut body) = (serde_json::Map::new(), Vec::new());
        for name in part.iter() {
            let mut info = header[*name].clone();
            let offsets = &info["data_offsets"];
            let (start, end) = (offsets[0].as_u64().unwrap(), offsets[1].as_u64().unwrap());
            let at = body.len() as u64;
            body.extend_from_slice(&data[start as usize..end as usize]);
            info["data_offsets"] = json!([at, at + end - start]);
            meta.insert(name.to_string(), info);
            weight_map.insert(name.to_string(), json!(file));
        }
        let meta = serde_json::to_vec(&meta).unwrap();
        let mut out = (meta.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&meta);
        out.extend_from_slice(&body);
        std::fs::write(dst.join(&file), out).unwrap();
    }
    let index = json!({"metadata": {"total_size": data.len()}, "weight_map": weight_map});
    std::fs::write(dst.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn a_sharded_safetensors_repo_fetches_its_index_and_shards_and_answers_as_unsharded() {
    let zoo = model::zoo("tiny-qwen3");
    let shards = TempHome::new("shards-src");
    write_sharded_copy(&zoo, &shards.0);
    let sharded = "tokenmill-test/tiny-qwen3-sharded";
    let hub = LocalHub::builder()
        .folder_repo(TINY, &zoo)
        .folder_repo(sharded, &shards.0)
        .start();
    let home = TempHome::new("shards");
    let env = hub_env(&hub.endpoint, &home, false);
    let server = ServedBinary::start_with_env(&["--model", TINY], &env);
    let whole = complete(&server, TINY);
    drop(server);
    hub.clear_requests();
    let server = ServedBinary::start_with_env(&["--model", sharded], &env);
    let split = complete(&server, sharded);
    drop(server);
    assert_eq!(
        sorted(hub.downloaded()),
        [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    // The same greedy tokens with the same log-probabilities: the same weights.
    assert_eq!(
        split["choices"][0]["logprobs"],
        whole["choices"][0]["logprobs"]
    );
    assert!(
        split["choices"][0]["logprobs"]["token_logprobs"][3].is_number(),
        "{split}"
    );
}

#[test]
fn offline_with_an_empty_cache_or_no_network_is_one_line_naming_repo_and_cache() {
    let home = TempHome::new("empty");
    let cache = home.cache().display().to_string();
    let (code, stderr) = serve_failure(
        &["--model", "org/absent:Q4_K_M"],
        &hub_env(DEAD_ENDPOINT, &home, true),
    );
    assert_one_error_line(
        code,
        &stderr,
        &["HF_HUB_OFFLINE", "org/absent:Q4_K_M", &cache],
    );

    let (code, stderr) = serve_failure(
        &["--model", "org/absent"],
        &hub_env(DEAD_ENDPOINT, &home, false),
    );
    assert_one_error_line(
        code,
        &stderr,
        &["cannot reach", DEAD_ENDPOINT, "org/absent", &cache],
    );
}

#[test]
fn a_revision_names_a_commit_and_an_unknown_one_or_repo_is_refused_by_name() {
    let hub = tiny_hub();
    let home = TempHome::new("revision");
    let env = hub_env(&hub.endpoint, &home, false);
    let commit = hub.commit(TINY);
    let server = ServedBinary::start_with_env(&["--model", TINY, "--revision", &commit], &env);
    complete(&server, TINY);
    drop(server);
    assert!(snapshot(&home, TINY, &commit)
        .join("model.safetensors")
        .is_file());
    let refs = home.cache().join("models--tokenmill-test--tiny-qwen3/refs");
    assert!(!refs.join(&commit).exists());

    let (code, stderr) = serve_failure(&["--model", TINY, "--revision", "v9"], &env);
    assert_one_error_line(code, &stderr, &[TINY, "revision v9", "HTTP 404"]);
    let (code, stderr) = serve_failure(&["--model", "tokenmill-test/none"], &env);
    assert_one_error_line(
        code,
        &stderr,
        &["tokenmill-test/none", "HTTP 401", "HF_TOKEN"],
    );
    let (code, stderr) = serve_failure(&["--model", &format!("{TINY}:Q4_0")], &env);
    assert_one_error_line(code, &stderr, &[TINY, "no GGUF file of quantization Q4_0"]);
}

#[test]
fn a_corrupt_download_is_refused_and_not_kept_as_complete() {
    let zoo = model::zoo("tiny-qwen3");
    let hub = tiny_hub();
    hub.corrupt("model.safetensors");
    let home = TempHome::new("corrupt");
    let sha = hub.sha256(TINY, "model.safetensors");
    let (code, stderr) = serve_failure(&["--model", TINY], &hub_env(&hub.endpoint, &home, false));
    assert_error_line(code, &stderr, &["model.safetensors", TINY, "sha256", &sha]);
    let repo = home.cache().join("models--tokenmill-test--tiny-qwen3");
    assert!(!repo.join("blobs").join(&sha).exists());
    assert!(!snapshot(&home, TINY, &hub.commit(TINY))
        .join("model.safetensors")
        .exists());
    drop(hub);

    // The same repository served whole: the file is fetched again, not taken from the cache.
    let hub = LocalHub::builder().folder_repo(TINY, &zoo).start();
    let server =
        ServedBinary::start_with_env(&["--model", TINY], &hub_env(&hub.endpoint, &home, false));
    complete(&server, TINY);
    assert!(hub.downloaded().contains(&"model.safetensors".to_owned()));
}

#[test]
fn a_transfer_cut_part_way_resumes_from_where_it_stopped() {
    let hub = tiny_hub();
    let cut = 100_000;
    hub.cut_downloads("model.safetensors", cut, 1);
    let home = TempHome::new("resume");
    let server =
        ServedBinary::start_with_env(&["--model", TINY], &hub_env(&hub.endpoint, &home, false));
    complete(&server, TINY);
    let weights: Vec<_> = hub
        .requests()
        .into_iter()
        .filter(|r| r.is_download() && r.path.ends_with("/model.safetensors"))
        .collect();
    assert_eq!(weights.len(), 2, "{weights:?}");
    assert_eq!(weights[0].sent, cut);
    assert_eq!(
        weights[1].range.as_deref(),
        Some(format!("bytes={cut}-").as_str())
    );
    let size = std::fs::metadata(model::zoo("tiny-qwen3").join("model.safetensors"))
        .unwrap()
        .len();
    assert_eq!(weights[1].sent as u64, size - cut as u64);
}

#[test]
fn a_transfer_cut_past_every_retry_is_resumed_by_the_next_start() {
    let hub = tiny_hub();
    // As many cuts as a start makes tries (6, docs/models.md).
    let (cut, tries) = (50_000, 6);
    hub.cut_downloads("model.safetensors", cut, tries);
    let home = TempHome::new("resume-later");
    let env = hub_env(&hub.endpoint, &home, false);
    let (code, stderr) = serve_failure(&["--model", TINY], &env);
    let cache = home.cache().display().to_string();
    assert_error_line(code, &stderr, &["model.safetensors", TINY, &cache]);
    let cuts = hub.downloaded().len();
    assert_eq!(
        cuts,
        3 + tries,
        "three text files, then each try of the weights"
    );

    hub.clear_requests();
    let server = ServedBinary::start_with_env(&["--model", TINY], &env);
    complete(&server, TINY);
    let weights: Vec<_> = hub
        .requests()
        .into_iter()
        .filter(|r| r.is_download())
        .collect();
    assert_eq!(weights.len(), 1, "{weights:?}");
    let kept = cut * tries;
    assert_eq!(
        weights[0].range.as_deref(),
        Some(format!("bytes={kept}-").as_str())
    );
}

#[test]
fn the_official_python_client_and_tokenmill_share_one_cache_both_ways() {
    let hub = LocalHub::builder()
        .folder_repo(TINY, &model::zoo("tiny-qwen3"))
        .folder_repo("tokenmill-test/tiny-llama3", &model::zoo("tiny-llama3"))
        .start();
    let home = TempHome::new("python");
    let home_arg = home.0.to_str().unwrap().to_owned();
    let files = [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors",
    ];
    let specs = |repo: &str| -> Vec<String> {
        files
            .iter()
            .map(|f| format!("{f}={}", hub.sha256(repo, f)))
            .collect()
    };
    // Python fetches, tokenmill serves offline from what it fetched.
    let mut args = vec![
        hub.endpoint.clone(),
        home_arg.clone(),
        "download".into(),
        TINY.into(),
    ];
    args.extend(specs(TINY));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if !run_client_script("hub_client.py", Package::Optional("huggingface_hub"), &args) {
        return;
    }
    assert_eq!(
        sorted(hub.downloaded()),
        sorted(files.map(str::to_owned).to_vec())
    );
    hub.clear_requests();
    let server =
        ServedBinary::start_with_env(&["--model", TINY], &hub_env(DEAD_ENDPOINT, &home, true));
    complete(&server, TINY);
    drop(server);

    // tokenmill fetches, Python finds every file offline with the right bytes.
    let llama = "tokenmill-test/tiny-llama3";
    let server =
        ServedBinary::start_with_env(&["--model", llama], &hub_env(&hub.endpoint, &home, false));
    complete(&server, llama);
    drop(server);
    let mut args = vec![
        DEAD_ENDPOINT.to_owned(),
        home_arg,
        "offline".into(),
        llama.into(),
    ];
    args.extend(specs(llama));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(run_client_script(
        "hub_client.py",
        Package::Optional("huggingface_hub"),
        &args
    ));
}
