//! The disk tier on a really full filesystem: the server runs in a private mount namespace
//! on a 2 MiB tmpfs (`unshare --mount`, as root; `--map-root-user` where unprivileged user
//! namespaces are allowed), so its writer meets `ENOSPC` after a few blocks. Every request
//! succeeds, one log line says the disk is full, the writer attempts no write per block
//! after that (one failure on `/metrics`, the rest skipped), and no partial file is left.
//! A machine where neither form can mount fails the test, saying why: it never skips.

use crate::common::{self, ServedBinary};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Mounts a 2 MiB tmpfs on `$0`, then runs the rest of the arguments in its place.
const MOUNT_AND_EXEC: &str = "mount -t tmpfs -o size=2m tmpfs \"$0\" && exec \"$@\"";

/// The `unshare` flags that can mount a tmpfs here: tried on a throwaway namespace first.
fn unshare_flags(dir: &Path) -> Vec<&'static str> {
    let mut why = Vec::new();
    for flags in [vec!["--mount"], vec!["--mount", "--map-root-user"]] {
        let probe = Command::new("unshare")
            .args(&flags)
            .args(["sh", "-c", MOUNT_AND_EXEC])
            .arg(dir)
            .arg("true")
            .output();
        match probe {
            Ok(out) if out.status.success() => return flags,
            Ok(out) => why.push(format!(
                "unshare {}: {}",
                flags.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => why.push(format!("unshare: {e}")),
        }
    }
    panic!(
        "this test needs a really full filesystem: a 2 MiB tmpfs mounted in a private mount \
         namespace, which needs root (as CI runs) or unprivileged user namespaces; neither \
         worked here: {}",
        why.join("; ")
    );
}

fn call(server: &ServedBinary, path: &str, body: Option<Value>) -> (u16, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let url = format!("{}{path}", server.base_url);
        let request = match body {
            Some(body) => client.post(url).json(&body),
            None => client.get(url),
        };
        let response = request
            .timeout(Duration::from_secs(300))
            .send()
            .await
            .expect("the server answers");
        (response.status().as_u16(), response.text().await.unwrap())
    })
}

/// A `/metrics` counter's value.
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not on /metrics:\n{metrics}"))
}

/// The files under `dir` as the process `pid` sees them (inside its mount namespace).
fn files_seen_by(pid: u32, dir: &Path) -> Vec<PathBuf> {
    let root = PathBuf::from(format!("/proc/{pid}/root")).join(dir.strip_prefix("/").unwrap());
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&root)
        .expect("the tmpfs, through /proc")
        .flatten()
    {
        match std::fs::read_dir(entry.path()) {
            Ok(inner) => out.extend(inner.flatten().map(|e| e.path())),
            Err(_) => out.push(entry.path()),
        }
    }
    out
}

#[test]
fn a_full_disk_leaves_every_request_served_with_one_log_line_and_no_partial_file() {
    common::skip_without_model!();
    let dir = std::env::temp_dir().join(format!("tokenmill-full-disk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flags = unshare_flags(&dir);
    let model = common::model::path();
    let mut command = Command::new("unshare");
    command
        .args(&flags)
        .args(["sh", "-c", MOUNT_AND_EXEC])
        .arg(&dir)
        .arg(env!("CARGO_BIN_EXE_tokenmill"))
        .args(["serve", "--port", "0", "--model"])
        .arg(&model)
        .arg("--kv-offload-dir")
        .arg(&dir);
    let server = ServedBinary::start_command(command);

    // Each prompt is some twenty blocks of the default model's KV, a few hundred KiB each:
    // far more than 2 MiB.
    let prompts: Vec<String> = ["harbor", "violin", "meadow", "lantern"]
        .iter()
        .map(|w| (0..300).map(|i| format!("{w}{i} ")).collect())
        .collect();
    let mut texts = Vec::new();
    for prompt in prompts.iter().chain(&prompts[..1]) {
        let body = json!({"prompt": prompt, "max_tokens": 4, "temperature": 0});
        let (status, reply) = call(&server, "/v1/completions", Some(body));
        assert_eq!(status, 200, "{reply}");
        let reply: Value = serde_json::from_str(&reply).unwrap();
        texts.push(reply["choices"][0]["text"].as_str().unwrap().to_owned());
    }
    assert_eq!(texts[0], texts[4], "the repeated prompt's answer changed");

    let (_, metrics) = call(&server, "/metrics", None);
    let written = counter(&metrics, "tokenmill:kv_offload_blocks_written_total");
    let failures = counter(&metrics, "tokenmill:kv_offload_write_failures_total");
    let skipped = counter(&metrics, "tokenmill:kv_offload_blocks_skipped_total");
    assert!(written >= 1.0, "nothing fit on the tmpfs: {written}");
    assert_eq!(
        failures, 1.0,
        "a write was attempted on the full disk again"
    );
    assert!(skipped >= 10.0, "{skipped} blocks skipped");

    let log = server.log.lock().unwrap().clone();
    let full: Vec<&String> = log.iter().filter(|l| l.contains("is full")).collect();
    assert_eq!(full.len(), 1, "the full disk is logged once: {full:?}");

    let files = files_seen_by(server.pid(), &dir);
    let partial: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
        .collect();
    assert!(partial.is_empty(), "partial files left: {partial:?}");
    let blocks = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "kvb"))
        .count();
    assert_eq!(blocks as f64, written);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
