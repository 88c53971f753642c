//! The official `openai` Python package talks to the server: a streamed chat, a completion, and
//! a forced tool call read through `message.tool_calls[0].function.arguments`.
//!
//! Runs `tests/openai_sdk.py` with the Python in `TOKENMILL_PYTHON` (default `python3`), which
//! must have `openai` installed; `scripts/test.sh` sets that variable up. Without it, a
//! `python3` lacking `openai` makes the test say SKIPPED (the offline tier).

use crate::common;

use common::*;

#[test]
fn the_openai_python_client_streams_a_chat_gets_a_completion_and_a_tool_call() {
    crate::common::skip_without_model!();
    let base = server().base_url();
    common::python_client::run_client_script(
        "openai_sdk.py",
        common::python_client::Package::Required("openai"),
        &[&base, "SmolLM2-135M-Instruct.Q4_1"],
    );
}
