//! The official `openai` Python package talks to the server: a streamed chat, a completion, and
//! a forced tool call read through `message.tool_calls[0].function.arguments`.
//!
//! Runs `tests/openai_sdk.py` with the Python in `TOKENMILL_PYTHON` (default `python3`), which
//! must have `openai` installed; `scripts/test.sh` sets that variable up. Without it, a
//! `python3` lacking `openai` makes the test say SKIPPED (the offline tier).

use crate::common;

use std::process::Command;

use common::*;

#[test]
fn the_openai_python_client_streams_a_chat_gets_a_completion_and_a_tool_call() {
    crate::common::skip_without_model!();
    // Set by scripts/test.sh (the full tier), where a Python without `openai` fails the test;
    // unset (the offline tier), the system's Python without it makes the test say SKIPPED.
    let chosen = std::env::var("TOKENMILL_PYTHON").ok();
    let python = chosen.clone().unwrap_or_else(|| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_sdk.py");
    let base = server().base_url();
    let output = Command::new(&python)
        .args([script, &base, "SmolLM2-135M-Instruct.Q4_1"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python} ({e}): set TOKENMILL_PYTHON, as .ci/run does")
        });
    let stderr = String::from_utf8_lossy(&output.stderr);
    if chosen.is_none() && output.status.code() == Some(3) {
        common::model::say_skipped(&format!(
            "{python} lacks the openai package (scripts/test.sh installs it in a venv)"
        ));
        return;
    }
    assert_ne!(
        output.status.code(),
        Some(3),
        "`import openai` failed with {python}: {stderr}\n\
         install it in a venv and point TOKENMILL_PYTHON at its python, as .ci/run does"
    );
    assert!(
        output.status.success(),
        "openai_sdk.py failed ({}):\n{stderr}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
}
