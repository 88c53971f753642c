//! LangChain's OpenAI client (`langchain-openai`, as agent frameworks use it) talks to the
//! server: invoke, stream, structured output, a forced tool call, and the Responses API.
//!
//! Runs `tests/langchain_client.py` with the Python in `TOKENMILL_PYTHON`; `scripts/test.sh`
//! installs the package where it can, and the test says SKIPPED where it is missing.

use crate::common;

use common::*;

#[test]
fn langchains_openai_client_invokes_streams_calls_a_tool_and_speaks_responses() {
    crate::common::skip_without_model!();
    let base = server().base_url();
    common::python_client::run_client_script(
        "langchain_client.py",
        common::python_client::Package::Optional("langchain-openai"),
        &[&base, "SmolLM2-135M-Instruct.Q4_1"],
    );
}
