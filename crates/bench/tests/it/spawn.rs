//! `--spawn`: the server under test is started, awaited and always stopped, even on failure.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::mock_server::{MockOptions, MockServer};
use common::spawned_process::{placeholder_server, spawned_pid, stops_within};
use common::{serve_args, write_jsonl};

fn mock_healthy_once(pid_file: &Path) -> MockServer {
    MockServer::start(MockOptions {
        tokenizer: true,
        healthy_once_exists: Some(pid_file.to_owned()),
        ..Default::default()
    })
}

fn assert_stopped_soon(pid_file: &Path) {
    let pid = spawned_pid(pid_file);
    assert!(
        stops_within(&pid, Duration::from_secs(5)),
        "process {pid} still runs after the benchmark"
    );
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
