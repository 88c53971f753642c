//! Stop rules on the real model: EOS, stop token ids, ignore_eos, min_tokens,
//! max_tokens and max_model_len, and aborts freeing their blocks.

use crate::common;

use tokenmill_engine::{EngineConfig, FinishReason, Request, SamplingParams};

/// "The capital of France is Paris.<|im_end|>": greedy ends with EOS (2) at step 8.
fn capital() -> (Vec<u32>, Vec<u32>) {
    let case = common::golden()
        .cases
        .into_iter()
        .find(|c| c.name == "chat-capital")
        .unwrap();
    (case.prompt_ids, case.greedy_ids)
}

fn run(params: SamplingParams, config: EngineConfig) -> tokenmill_engine::Completion {
    let mut engine = common::load_engine(config);
    let prompt = capital().0;
    engine
        .generate(vec![Request {
            prompt,
            params,
            priority: 0,
            constraint: None,
        }])
        .unwrap()
        .remove(0)
}

fn config() -> EngineConfig {
    EngineConfig {
        num_kv_blocks: Some(32),
        ..EngineConfig::default()
    }
}

#[test]
fn eos_stops_generation_and_is_the_last_token() {
    crate::common::skip_without_model!();
    let (_, golden) = capital();
    let done = run(SamplingParams::greedy(40), config());
    assert_eq!(done.token_ids(), golden);
    assert_eq!(
        (done.finish_reason, done.token_ids().last()),
        (FinishReason::Stop, Some(&2))
    );
}

#[test]
fn ignore_eos_runs_to_max_tokens() {
    crate::common::skip_without_model!();
    let done = run(
        SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(12)
        },
        config(),
    );
    assert_eq!(
        (done.tokens.len(), done.finish_reason),
        (12, FinishReason::Length)
    );
    assert_eq!(
        done.token_ids()[7],
        2,
        "EOS was produced and generation went on"
    );
}

#[test]
fn min_tokens_forbids_eos_until_reached() {
    crate::common::skip_without_model!();
    let done = run(
        SamplingParams {
            min_tokens: 10,
            ..SamplingParams::greedy(20)
        },
        config(),
    );
    assert!(!done.token_ids()[..10].contains(&2));
    assert!(done.tokens.len() >= 10);
}

#[test]
fn a_stop_token_id_ends_the_request_with_stop() {
    crate::common::skip_without_model!();
    let (_, golden) = capital();
    let done = run(
        SamplingParams {
            stop_token_ids: [golden[2]].into(),
            ..SamplingParams::greedy(40)
        },
        config(),
    );
    assert_eq!(
        (done.token_ids(), done.finish_reason),
        (golden[..3].to_vec(), FinishReason::Stop)
    );
}

#[test]
fn max_model_len_caps_prompt_plus_output() {
    crate::common::skip_without_model!();
    let prompt_len = capital().0.len();
    let done = run(
        SamplingParams::greedy(40),
        EngineConfig {
            max_model_len: Some(prompt_len + 4),
            ..config()
        },
    );
    assert_eq!(
        (done.tokens.len(), done.finish_reason),
        (4, FinishReason::Length)
    );
}

#[test]
fn aborting_a_running_request_frees_its_blocks_at_once() {
    crate::common::skip_without_model!();
    let mut engine = common::load_engine(config());
    let (id, mut events) = engine
        .add_request(Request {
            prompt: capital().0,
            params: SamplingParams::greedy(30),
            priority: 0,
            constraint: None,
        })
        .unwrap();
    engine.step().unwrap();
    assert!(engine.stats().kv_cache_usage > 0.0);
    engine.abort(id);
    assert_eq!(engine.stats().kv_cache_usage, 0.0);
    assert!(!engine.has_unfinished());
    let mut last = None;
    while let Ok(e) = events.try_recv() {
        last = Some(e);
    }
    assert!(matches!(
        last,
        Some(tokenmill_engine::RequestEvent::Finished {
            reason: FinishReason::Abort,
            ..
        })
    ));
}

#[test]
fn requests_that_cannot_fit_are_refused_with_a_reason() {
    crate::common::skip_without_model!();
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(4),
        max_model_len: Some(128),
        ..config()
    });
    // 50 + 30 tokens may be needed; 4 blocks of 16 hold 64.
    let long = Request {
        prompt: vec![1; 50],
        params: SamplingParams::greedy(30),
        priority: 0,
        constraint: None,
    };
    let err = engine.add_request(long).unwrap_err().to_string();
    assert!(err.contains("pool holds 64"), "{err}");
    let too_long = Request {
        prompt: vec![1; 128],
        params: SamplingParams::greedy(1),
        priority: 0,
        constraint: None,
    };
    assert!(engine
        .add_request(too_long)
        .unwrap_err()
        .to_string()
        .contains("max_model_len is 128"));
    let empty = Request {
        prompt: vec![],
        params: SamplingParams::greedy(1),
        priority: 0,
        constraint: None,
    };
    assert!(engine
        .add_request(empty)
        .unwrap_err()
        .to_string()
        .contains("empty"));
    let bad_token = Request {
        prompt: vec![999_999],
        params: SamplingParams::greedy(1),
        priority: 0,
        constraint: None,
    };
    assert!(engine
        .add_request(bad_token)
        .unwrap_err()
        .to_string()
        .contains("outside the vocabulary"));
}
