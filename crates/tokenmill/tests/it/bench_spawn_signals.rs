//! `tokenmill bench sweep --spawn` (and `bench serve --spawn`, and `tune`) stopped by SIGTERM,
//! as `timeout` stops it, or by Ctrl-C stops the server it spawned before exiting.

// The stand-in server and the stop checks are the bench crate's own tests' helpers.
use crate::common::spawned_process;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use spawned_process::{is_stopped, placeholder_server, spawned_pid, stops_within};

fn start_tokenmill(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Signals the benchmark once its server runs; the benchmark must exit and the server be gone.
fn assert_signal_stops_the_spawned_server(subcommand: &[&str], signal_name: &str) {
    let dir = std::env::temp_dir().join(format!(
        "tokenmill-bench-signal-{}-{signal_name}-{}",
        std::process::id(),
        subcommand[..2].join("-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let _ = std::fs::remove_file(&pid_file);
    let mut command = placeholder_server(&pid_file);
    if subcommand[0] == "tune" {
        // The configuration's flags go where the shell ignores them.
        command = format!(": {{flags}}; {command}");
    }
    let output_dir = dir.join("out");
    let mut args = subcommand.to_vec();
    // Nothing answers on port 9, so the benchmark waits for its server until it is signalled.
    args.extend([
        "--base-url",
        "http://127.0.0.1:9",
        "--spawn",
        &command,
        "--spawn-timeout",
        "120",
    ]);
    if subcommand.contains(&"sweep") || subcommand[0] == "tune" {
        args.extend(["--output-dir", output_dir.to_str().unwrap()]);
    }
    let mut bench = start_tokenmill(&args);
    let server = spawned_pid(&pid_file);
    assert!(!is_stopped(&server));
    signal(&bench, signal_name);

    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = bench.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = bench.kill();
            panic!("the benchmark still runs 20 s after {signal_name}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !stops_within(&server, Duration::from_secs(5)) {
        // Not left behind by the test either (it also holds the benchmark's stderr open).
        let _ = Command::new("kill").args(["-KILL", &server]).status();
        panic!("the spawned server (pid {server}) outlived the benchmark stopped by {signal_name}");
    }
    let stderr = std::io::read_to_string(bench.stderr.take().unwrap()).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("interrupted by {signal_name}")),
        "{stderr}"
    );
}

#[test]
fn sigterm_to_bench_sweep_stops_the_spawned_server() {
    assert_signal_stops_the_spawned_server(&["bench", "sweep", "--concurrency", "1"], "SIGTERM");
}

#[test]
fn ctrl_c_to_bench_sweep_stops_the_spawned_server() {
    assert_signal_stops_the_spawned_server(&["bench", "sweep", "--concurrency", "1"], "SIGINT");
}

#[test]
fn sighup_to_bench_serve_stops_the_spawned_server() {
    assert_signal_stops_the_spawned_server(&["bench", "serve"], "SIGHUP");
}

#[test]
fn sigterm_to_tune_stops_the_configurations_server_and_runs_no_other() {
    assert_signal_stops_the_spawned_server(
        &[
            "tune",
            "--itl-p99-ms",
            "30",
            "--max-num-seqs",
            "8,16",
            "--max-num-batched-tokens",
            "64",
        ],
        "SIGTERM",
    );
}
