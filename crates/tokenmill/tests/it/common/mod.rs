//! The `tokenmill` binary serving the default model on a free port, for tests that need the
//! real process (signals, exit codes, a client run against it); killed on drop.
#![allow(dead_code)] // Each test module uses its own part.

// The bench's stand-in for a spawned server, shared with the bench crate's tests.
#[path = "../../../../bench/tests/it/common/spawned_process.rs"]
pub mod spawned_process;
// Whether a model test runs, skips or fails, as the engine's tests decide it.
#[path = "../../../../engine/tests/it/common/model.rs"]
pub mod model;

// The official Python clients' scripts, run as the server's tests run them.
pub mod local_hub;
#[path = "../../../../server/tests/it/common/python_client.rs"]
pub mod python_client;

pub(crate) use model::skip_without_model;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct ServedBinary {
    child: Child,
    pub base_url: String,
    /// Every line of its log so far.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ServedBinary {
    /// `tokenmill serve --port 0 --model <default> <args>`, returned once it logs the address
    /// it listens on. Its log goes to this test's stderr, prefixed `server:`.
    pub fn start(args: &[&str]) -> Self {
        let model = model::path();
        let model = model.to_str().expect("a UTF-8 model path");
        let args: Vec<&str> = args.iter().copied().chain(["--model", model]).collect();
        Self::start_with_env(&args, &[])
    }

    /// `tokenmill serve --port 0 <args>` with these environment variables set, returned once
    /// it logs the address it listens on.
    pub fn start_with_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tokenmill"));
        command.args(["serve", "--port", "0"]).args(args);
        for (name, value) in env {
            command.env(name, value);
        }
        Self::start_command(command)
    }

    /// `command`, which must end up running `tokenmill serve --port 0` in its own process
    /// (a wrapper that `exec`s it), returned once it logs the address it listens on.
    pub fn start_command(mut command: Command) -> Self {
        command
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("the binary runs");
        let stderr = child.stderr.take().unwrap();
        let (addr_tx, addr_rx) = mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        // Reads the log to its end, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("server: {line}");
                kept.lock().unwrap().push(line.clone());
                if let Some(rest) = line.split("on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or_default();
                    let _ = addr_tx.send(format!("http://{addr}"));
                }
            }
        });
        let base_url = addr_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the server logs the address it listens on");
        Self {
            child,
            base_url,
            log,
        }
    }

    /// The process id, to read its resident memory from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, as an orchestrator stopping the server would.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// The exit status, if the process ends within `limit`.
    pub fn wait_for_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for ServedBinary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
