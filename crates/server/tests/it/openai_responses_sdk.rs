//! The official `openai` Python package talks to `/v1/responses`: `responses.create` plain and
//! streamed, `responses.stream` and `responses.parse` with a Pydantic `text_format`, a
//! function-tool round trip (by `previous_response_id` and with the whole input), its
//! `input_items.list`, and the store's retrieve, delete and eviction as `NotFoundError`.
//!
//! Runs `tests/openai_responses_sdk.py` with the Python in `TOKENMILL_PYTHON` (default
//! `python3`), which must have `openai` installed; scripts/test.sh sets that variable up.
//! Without it, a `python3` lacking `openai` makes the test say SKIPPED (the offline tier).

use crate::common;

use common::*;
use tokenmill_server::http::api_server::ServerOptions;
use tokenmill_server::serving::request_limits::RequestLimits;

/// Small, so the script can push a response out of the store.
const STORED: usize = 4;

#[test]
fn the_openai_python_client_creates_streams_chains_and_stores_responses() {
    crate::common::skip_without_model!();
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
    common::python_client::run_client_script(
        "openai_responses_sdk.py",
        common::python_client::Package::Required("openai"),
        &[
            &server.base_url(),
            "SmolLM2-135M-Instruct.Q4_1",
            &STORED.to_string(),
        ],
    );
}
