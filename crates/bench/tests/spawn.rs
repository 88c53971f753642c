//! `--spawn`: the server under test is started, awaited and always stopped, even on failure.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::mock_server::{MockOptions, MockServer};
use common::{serve_args, write_jsonl};

/// A command whose background child stands in for a server, and records that child's pid.
/// Writing the pid file is what makes the mock report healthy, so the benchmark cannot
/// finish (and stop the command) before the child exists.
fn placeholder_server(pid_file: &Path) -> String {
    format!("sleep 300 & echo $! > {}; wait", pid_file.display())
}

fn mock_healthy_once(pid_file: &Path) -> MockServer {
    MockServer::start(MockOptions {
        tokenizer: true,
        healthy_once_exists: Some(pid_file.to_owned()),
        ..Default::default()
    })
}

/// True once the process is gone (or a zombie awaiting its reaper, which runs nothing).
fn is_stopped(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

fn assert_stopped_soon(pid_file: &Path) {
    let pid = std::fs::read_to_string(pid_file)
        .expect("the spawned command ran")
        .trim()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !is_stopped(&pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} still runs after the benchmark"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn spawned_server_is_stopped_after_a_successful_run() {
    let dir = tempfile::tempdir().unwrap();
    let (pid_file, dataset) = (dir.path().join("pid"), dir.path().join("p.jsonl"));
    let server = mock_healthy_once(&pid_file);
    write_jsonl(&dataset, &["n=2".to_owned()]);
    let command = placeholder_server(&pid_file);
    let args = serve_args(&[
        "--base-url",
        &server.base_url,
        "--spawn",
        &command,
        "--dataset",
        "jsonl",
        "--dataset-path",
        dataset.to_str().unwrap(),
        "--num-prompts",
        "2",
    ]);
    tokenmill_bench::run_serve(args).expect("the run completes");
    assert_stopped_soon(&pid_file);
}

#[test]
fn spawned_server_is_stopped_when_the_run_fails() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let server = mock_healthy_once(&pid_file);
    let command = placeholder_server(&pid_file);
    let args = serve_args(&[
        "--base-url",
        &server.base_url,
        "--spawn",
        &command,
        "--dataset",
        "jsonl",
        "--dataset-path",
        "/nonexistent.jsonl",
    ]);
    assert!(tokenmill_bench::run_serve(args).is_err());
    assert_stopped_soon(&pid_file);
}

#[test]
fn server_that_never_becomes_healthy_fails_after_the_spawn_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let command = placeholder_server(&pid_file);
    let args = serve_args(&[
        "--base-url",
        "http://127.0.0.1:9",
        "--spawn",
        &command,
        "--spawn-timeout",
        "1",
    ]);
    let started = Instant::now();
    let error = tokenmill_bench::run_serve(args).unwrap_err();
    assert!(error.to_string().contains("did not answer 200"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_stopped_soon(&pid_file);
}

#[test]
fn server_that_exits_before_becoming_healthy_is_reported() {
    let args = serve_args(&["--base-url", "http://127.0.0.1:9", "--spawn", "exit 3"]);
    let error = tokenmill_bench::run_serve(args).unwrap_err();
    assert!(error.to_string().contains("exited"), "{error}");
}
