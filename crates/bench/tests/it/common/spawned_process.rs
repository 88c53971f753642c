//! The stand-in for a server that `--spawn` starts, and the checks that it was stopped.
//!
//! Shared by the bench crate's tests and the `tokenmill` binary's signal tests (included there
//! by path), so it uses nothing but std.

use std::path::Path;
use std::time::{Duration, Instant};

/// A command whose background child stands in for a server and writes that child's pid (and
/// a newline, so a reader never sees half of it) to `pid_file`.
pub fn placeholder_server(pid_file: &Path) -> String {
    format!("sleep 300 & echo $! > {}; wait", pid_file.display())
}

/// The pid the placeholder wrote, waiting up to 30 s for the spawned command to run.
pub fn spawned_pid(pid_file: &Path) -> String {
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
pub fn is_stopped(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Whether the process stops within `limit`: stopping it is what the tested code does on its
/// way out, which may take a moment after the call under test returns.
pub fn stops_within(pid: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !is_stopped(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
