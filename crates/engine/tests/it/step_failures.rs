//! A failing step (an error or a panic in the forward pass) finishes its own requests with
//! an error, the engine goes on serving, and health turns bad only after failures in a row.

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokenmill_engine::core::engine_handle::MAX_CONSECUTIVE_STEP_FAILURES;
use tokenmill_engine::{
    EngineConfig, EngineError, EngineHandle, EngineHealth, FinishReason, Request, RequestEvent,
    SamplingParams,
};

/// Two output tokens take two steps, so a request's end is reported by a later step than its
/// first: the success of that first step is already recorded when the end arrives.
fn request() -> Request {
    Request {
        prompt: vec![1, 2, 3, 4],
        params: SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(2)
        },
        priority: 0,
        constraint: None,
    }
}

/// Runs one request to its end and returns its finish reason.
fn finish_reason(handle: &EngineHandle) -> FinishReason {
    let mut stream = handle.add_request(request()).unwrap();
    loop {
        match stream.events.blocking_recv().expect("the request ends") {
            RequestEvent::Finished { reason, .. } => return reason,
            RequestEvent::Token { .. }
            | RequestEvent::PromptLogprobs { .. }
            | RequestEvent::Embedding { .. } => {}
        }
    }
}

fn engine_with_fault(
    fault: impl FnMut(u32) -> Result<(), EngineError> + Send + Sync + 'static,
) -> EngineHandle {
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(16),
        ..EngineConfig::default()
    });
    let calls = Arc::new(AtomicU32::new(0));
    let mut fault = fault;
    engine.set_step_fault(Box::new(move |_| {
        fault(calls.fetch_add(1, Ordering::SeqCst))
    }));
    EngineHandle::spawn(engine)
}

#[test]
fn a_panicking_step_fails_its_request_and_the_next_request_is_served() {
    crate::common::skip_without_model!();
    let handle = engine_with_fault(|call| {
        if call == 0 {
            panic!("injected fault in the first step");
        }
        Ok(())
    });
    assert_eq!(finish_reason(&handle), FinishReason::Error);
    assert_eq!(finish_reason(&handle), FinishReason::Length);
    assert_eq!(handle.health(), EngineHealth::Healthy);
    handle.shutdown();
}

#[test]
fn steps_failing_in_a_row_make_the_engine_unhealthy_and_a_success_heals_it() {
    crate::common::skip_without_model!();
    let healthy_from = MAX_CONSECUTIVE_STEP_FAILURES;
    let handle = engine_with_fault(move |call| {
        if call < healthy_from {
            Err(EngineError::InvalidRequest(format!(
                "injected failure {call}"
            )))
        } else {
            Ok(())
        }
    });
    for failed in 1..=MAX_CONSECUTIVE_STEP_FAILURES {
        let expected = if failed < MAX_CONSECUTIVE_STEP_FAILURES {
            EngineHealth::Healthy
        } else {
            EngineHealth::Failing {
                consecutive: failed,
            }
        };
        assert_eq!(finish_reason(&handle), FinishReason::Error);
        assert_eq!(handle.health(), expected, "after {failed} failures");
    }
    assert_eq!(finish_reason(&handle), FinishReason::Length);
    assert_eq!(handle.health(), EngineHealth::Healthy);
    handle.shutdown();
}

#[test]
fn a_stopped_engine_reports_itself_stopped_and_refuses_requests() {
    crate::common::skip_without_model!();
    let handle = engine_with_fault(|_| Ok(()));
    assert_eq!(handle.health(), EngineHealth::Healthy);
    handle.shutdown();
    assert_eq!(handle.health(), EngineHealth::Stopped);
    assert!(matches!(
        handle.add_request(request()),
        Err(EngineError::EngineStopped)
    ));
}
