//! The official `openai` Python package talks to `/v1/responses`: `responses.create` plain and
//! streamed, `responses.stream` and `responses.parse` with a Pydantic `text_format`, a
//! function-tool round trip (by `previous_response_id` and with the whole input), its
//! `input_items.list`, and the store's retrieve, delete and eviction as `NotFoundError`.
//!
//! Runs `tests/openai_responses_sdk.py` with the Python in `TOKENMILL_PYTHON` (default
//! `python3`), which must have `openai` installed; scripts/test.sh sets that variable up.
//! Without it, a `python3` lacking `openai` makes the test say SKIPPED (the offline tier).

use crate::common;

use std::process::Command;

use common::*;
use tokenmill_server::api_server::ServerOptions;
use tokenmill_server::request_limits::RequestLimits;

/// Small, so the script can push a response out of the store.
const STORED: usize = 4;

#[test]
fn the_openai_python_client_creates_streams_chains_and_stores_responses() {
    crate::common::skip_without_model!();
    // Set by scripts/test.sh (the full tier), where a Python without `openai` fails the test;
    // unset (the offline tier), the system's Python without it makes the test say SKIPPED.
    let chosen = std::env::var("TOKENMILL_PYTHON").ok();
    let python = chosen.clone().unwrap_or_else(|| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_responses_sdk.py");
    let server = start_server(
        &[],
        ServerOptions {
            request_limits: RequestLimits {
                max_stored_responses: STORED,
                ..RequestLimits::default()
            },
            ..ServerOptions::default()
        },
    );
    let output = Command::new(&python)
        .args([
            script,
            &server.base_url(),
            "SmolLM2-135M-Instruct.Q4_1",
            &STORED.to_string(),
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python} ({e}): set TOKENMILL_PYTHON, as scripts/test.sh does")
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
         install it in a venv and point TOKENMILL_PYTHON at its python, as scripts/test.sh does"
    );
    assert!(
        output.status.success(),
        "openai_responses_sdk.py failed ({}):\n{stderr}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
}
