//! Token constraints on the real model: the sampler only draws allowed tokens, a finished
//! constraint ends the request with `stop`, a failing one ends it with `error`, and its state
//! follows accepted tokens only, through batching and preemption.

use crate::common;

use tokenmill_engine::{
    ConstraintCell, ConstraintError, EngineConfig, FinishReason, Request, SamplingParams,
    TokenConstraint, TokenMask,
};

/// Step `k` allows ids `[base + 7k, base + 7k + width)`, then the constraint is finished after
/// `length` tokens: what a step allows depends on every token before it, so a state that drifted
/// from the accepted tokens would show in the output.
#[derive(Clone)]
struct Window {
    base: u32,
    width: u32,
    length: usize,
    accepted: Vec<u32>,
    fail_at: Option<usize>,
}

impl Window {
    fn new(base: u32, length: usize) -> Self {
        Self {
            base,
            width: 40,
            length,
            accepted: Vec::new(),
            fail_at: None,
        }
    }

    fn start(&self) -> u32 {
        let drift: u32 = self.accepted.iter().map(|t| t % 3).sum();
        self.base + 7 * self.accepted.len() as u32 + drift
    }

    fn allows(&self, token: u32) -> bool {
        (self.start()..self.start() + self.width).contains(&token)
    }
}

impl TokenConstraint for Window {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<(), ConstraintError> {
        if self.fail_at == Some(self.accepted.len()) {
            return Err(ConstraintError("the test's constraint gave up".into()));
        }
        for id in self.start()..self.start() + self.width {
            mask.allow(id);
        }
        Ok(())
    }

    fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        if !self.allows(token) {
            return Err(ConstraintError(format!("{token} was not allowed")));
        }
        self.accepted.push(token);
        Ok(())
    }

    fn is_finished(&self) -> bool {
        self.accepted.len() >= self.length
    }

    fn boxed_clone(&self) -> Box<dyn TokenConstraint> {
        Box::new(self.clone())
    }
}

fn prompt(i: usize) -> Vec<u32> {
    (0..40 + 9 * i as u32)
        .map(|t| 200 + (t * 37 + i as u32) % 5000)
        .collect()
}

fn constrained(i: usize, window: Window, params: SamplingParams) -> Request {
    Request {
        prompt: prompt(i),
        params,
        priority: 0,
        constraint: Some(ConstraintCell::new(Box::new(window))),
    }
}

/// Replays a reply through a fresh window: each token must have been allowed when drawn.
fn follows(window: &Window, tokens: &[u32]) -> bool {
    let mut replay = window.clone();
    tokens.iter().all(|&t| replay.accept(t).is_ok())
}

#[test]
fn a_constrained_reply_draws_only_allowed_tokens_and_stops_when_the_constraint_finishes() {
    crate::common::skip_without_model!();
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(64),
        ..EngineConfig::default()
    });
    for params in [
        SamplingParams::greedy(50),
        SamplingParams {
            temperature: 1.0,
            seed: Some(5),
            ignore_eos: true,
            min_tokens: 20,
            max_tokens: 50,
            ..SamplingParams::default()
        },
    ] {
        let window = Window::new(1000, 9);
        let done = engine
            .generate(vec![constrained(0, window.clone(), params)])
            .unwrap()
            .remove(0);
        assert_eq!(done.finish_reason, FinishReason::Stop);
        assert_eq!(done.tokens.len(), 9);
        assert!(
            follows(&window, &done.token_ids()),
            "{:?}",
            done.token_ids()
        );
    }
}

#[test]
fn a_failing_constraint_ends_its_own_request_with_an_error_and_no_other() {
    crate::common::skip_without_model!();
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(64),
        ..EngineConfig::default()
    });
    let mut failing = Window::new(1000, 9);
    failing.fail_at = Some(3);
    let done = engine
        .generate(vec![
            constrained(0, failing, SamplingParams::greedy(20)),
            constrained(1, Window::new(3000, 6), SamplingParams::greedy(20)),
        ])
        .unwrap();
    assert_eq!(done[0].finish_reason, FinishReason::Error);
    assert_eq!(done[0].tokens.len(), 3);
    assert_eq!(done[1].finish_reason, FinishReason::Stop);
    assert_eq!(done[1].tokens.len(), 6);
}

#[test]
fn constrained_replies_are_the_same_alone_and_batched_with_preemption() {
    crate::common::skip_without_model!();
    let requests = |n: usize| -> Vec<Request> {
        (0..n)
            .map(|i| {
                let params = SamplingParams {
                    temperature: 0.8,
                    seed: Some(100 + i as u64),
                    max_tokens: 40,
                    ..SamplingParams::default()
                };
                if i % 3 == 2 {
                    // A free request among the constrained ones.
                    Request {
                        prompt: prompt(i),
                        params,
                        priority: 0,
                        constraint: None,
                    }
                } else {
                    constrained(i, Window::new(500 + 300 * i as u32, 30), params)
                }
            })
            .collect()
    };
    let mut alone_engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(64),
        ..EngineConfig::default()
    });
    let alone: Vec<Vec<u32>> = requests(12)
        .into_iter()
        .map(|r| {
            alone_engine
                .generate(vec![r])
                .unwrap()
                .remove(0)
                .token_ids()
        })
        .collect();
    let mut crowded = common::load_engine(EngineConfig {
        num_kv_blocks: Some(12),
        max_num_batched_tokens: 24,
        max_num_seqs: 12,
        ..EngineConfig::default()
    });
    let together: Vec<Vec<u32>> = crowded
        .generate(requests(12))
        .unwrap()
        .iter()
        .map(|c| c.token_ids())
        .collect();
    assert!(
        crowded.stats().num_preemptions > 0,
        "the pool never preempted"
    );
    assert_eq!(together, alone);
}
