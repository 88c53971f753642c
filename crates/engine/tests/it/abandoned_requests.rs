//! Requests whose client has gone (their event receiver dropped) are cancelled before they
//! cost anything: queued prompts of a request the client left are never computed.

use crate::common;

use tokenmill_engine::{EngineConfig, Request, SamplingParams};

#[test]
fn queued_requests_whose_receivers_are_dropped_are_never_computed() {
    crate::common::skip_without_model!();
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(64),
        ..EngineConfig::default()
    });
    let request = |first: u32| Request {
        prompt: (first..first + 40).collect(),
        params: SamplingParams::greedy(8),
        priority: 0,
        constraint: None,
    };
    let kept = engine.add_request(request(1)).unwrap().1;
    for i in 0..20 {
        drop(engine.add_request(request(100 + i)).unwrap().1);
    }
    assert_eq!(engine.stats().num_waiting, 21);
    let computed = engine.step().unwrap();
    assert_eq!(computed, 40, "only the kept request's prompt is computed");
    assert_eq!(engine.stats().num_waiting, 0);
    assert_eq!(engine.stats().num_running, 1);
    drop(kept);
}
