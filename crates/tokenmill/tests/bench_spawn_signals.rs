//! `tokenmill bench sweep --spawn` (and `bench serve --spawn`) stopped by SIGTERM, as `timeout`
//! stops it, or by Ctrl-C stops the server it spawned before exiting.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A stand-in server: a background `sleep` whose pid is written to `pid_file`. Nothing answers
/// `/health` (port 9), so the benchmark waits for it until it is signalled.
fn placeholder_server(pid_file: &Path) -> String {
    format!("sleep 300 & echo $! > {}; wait", pid_file.display())
}

fn start_bench(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

/// Waits for the spawned command to have written its pid.
fn spawned_pid(pid_file: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(pid) = std::fs::read_to_string(pid_file) {
            if pid.ends_with('\n') {
                return pid.trim().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "the spawned command never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
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
        subcommand[0]
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let _ = std::fs::remove_file(&pid_file);
    let command = placeholder_server(&pid_file);
    let output_dir = dir.join("out");
    let mut args = subcommand.to_vec();
    args.extend([
        "--base-url",
        "http://127.0.0.1:9",
        "--spawn",
        &command,
        "--spawn-timeout",
        "120",
    ]);
    if subcommand[0] == "sweep" {
        args.extend(["--output-dir", output_dir.to_str().unwrap()]);
    }
    let mut bench = start_bench(&args);
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
    let deadline = Instant::now() + Duration::from_secs(5);
    while !is_stopped(&server) {
        if Instant::now() > deadline {
            // Not left behind by the test either (it also holds the benchmark's stderr open).
            let _ = Command::new("kill").args(["-KILL", &server]).status();
            panic!(
                "the spawned server (pid {server}) outlived the benchmark stopped by {signal_name}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
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
    assert_signal_stops_the_spawned_server(&["sweep", "--concurrency", "1"], "SIGTERM");
}

#[test]
fn ctrl_c_to_bench_sweep_stops_the_spawned_server() {
    assert_signal_stops_the_spawned_server(&["sweep", "--concurrency", "1"], "SIGINT");
}

#[test]
fn sighup_to_bench_serve_stops_the_spawned_server() {
    assert_signal_stops_the_spawned_server(&["serve"], "SIGHUP");
}
