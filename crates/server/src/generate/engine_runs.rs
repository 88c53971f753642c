//! Queueing a planned request: one engine request per choice, each seen as a `ChoiceRun`.
//! Every protocol starts its runs here and shapes their deltas into its own reply.

use std::sync::Arc;

use crate::api::api_error::ApiError;
use crate::generate::choice_run::{ChoiceRun, ChoiceSetup};
use crate::generate::request_plan::{Endpoint, RequestPlan};
use crate::serving::app_state::AppState;
use crate::serving::off_runtime::off_runtime;
use crate::tools::reasoning_parser::{ReasoningDelivery, ReasoningParserKind};
use crate::tools::tool_call_parser::ToolCallParser;

/// The finish reason of a choice whose engine step failed; never shown as a finish reason.
pub const ENGINE_FAILED: &str = "error";

/// Queues one engine request per choice of `plan` and returns their runs (also used by the
/// Responses API, which shapes the same runs into its own events).
pub async fn start_runs(
    state: &Arc<AppState>,
    plan: &RequestPlan,
    endpoint: Endpoint,
) -> Result<Vec<ChoiceRun>, ApiError> {
    let handle = state.handle.clone();
    let mut requests = plan.requests.clone();
    if let Some(output) = plan.structured.clone() {
        let compiling = state.clone();
        let cell = off_runtime(move || compiling.compile_constraint(&output)).await?;
        for request in &mut requests {
            // Each choice gets its own parser state.
            request.constraint = Some(cell.clone());
        }
    }
    // `add_requests` blocks for up to one engine step while the engine thread assigns ids.
    // A client that leaves meanwhile drops the streams, and the engine aborts them next step.
    let streams = tokio::task::spawn_blocking(move || handle.add_requests(requests))
        .await
        .map_err(|e| ApiError::internal(format!("queueing the request failed: {e}")))??;
    let runs = streams
        .into_iter()
        .zip(&plan.requests)
        .map(|(stream, request)| {
            let setup = ChoiceSetup {
                handle: state.handle.clone(),
                tokenizer: state.tokenizer.clone(),
                metrics: state.metrics.clone(),
                prompt: request.prompt.clone(),
                stop: plan.stop.clone(),
                include_stop: plan.include_stop_str_in_output,
                skip_special_tokens: plan.skip_special_tokens,
                reasoning: reasoning(state, plan, endpoint),
                tool_calls: plan.tool_call_parser.map(|kind| {
                    let parser = ToolCallParser::new(kind, plan.parallel_tool_calls);
                    if plan.tool_calls_only {
                        parser.calls_only()
                    } else {
                        parser
                    }
                }),
                closing: state.closing.subscribe(),
            };
            ChoiceRun::new(setup, stream.id, stream.events)
        })
        .collect();
    Ok(runs)
}

/// The server's reasoning parser and the request's wish for its output, where reasoning is
/// split off at all: chat only, and not under `separate_reasoning: false`.
pub fn reasoning(
    state: &AppState,
    plan: &RequestPlan,
    endpoint: Endpoint,
) -> Option<(ReasoningParserKind, ReasoningDelivery)> {
    match endpoint {
        Endpoint::Chat => state.reasoning_parser.zip(plan.reasoning),
        Endpoint::Completions => None,
    }
}
