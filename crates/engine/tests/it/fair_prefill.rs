//! Fair prefill at the scheduler, without a model: a short request that arrives while a long
//! prompt is prefilling is scheduled in the very next step, and the long prompt's chunks
//! shrink deep in its context so a step costs no more than a full budget of fresh tokens.

use crate::common;

use std::time::{Duration, Instant};
use tokenmill_engine::config::{EngineConfig, PartialPrefillLimits, SchedulingPolicy};
use tokenmill_engine::kv::block_manager::BlockManager;
use tokenmill_engine::sched::scheduler::{Scheduler, SchedulerConfig};
use tokenmill_engine::sched::scheduler_output::SchedulerOutput;
use tokenmill_engine::sched::sequence::Sequence;
use tokenmill_engine::sched::step_cost_model::StepShape;
use tokenmill_engine::{Request, SamplingParams, SeqId};

const MAX_MODEL_LEN: usize = 8192;

/// The engine's default scheduling settings for an 8,192-token context.
fn scheduler(limits: PartialPrefillLimits) -> Scheduler {
    let defaults = EngineConfig::default();
    Scheduler::new(
        SchedulerConfig {
            max_num_batched_tokens: defaults.max_num_batched_tokens,
            max_num_seqs: defaults.max_num_seqs,
            prefill_limits: limits,
            policy: SchedulingPolicy::Fcfs,
            max_model_len: MAX_MODEL_LEN,
            eos_token_ids: vec![0],
            target_itl: None,
        },
        BlockManager::new(MAX_MODEL_LEN / 16 * 2, 16, false),
    )
}

fn default_limits() -> PartialPrefillLimits {
    EngineConfig::default().prefill_limits(MAX_MODEL_LEN)
}

fn add(s: &mut Scheduler, id: u64, prompt_len: usize) {
    let req = Request {
        prompt: (0..prompt_len as u32).map(|i| 1 + i % 1000).collect(),
        params: SamplingParams::greedy(4),
        priority: 0,
        constraint: None,
    };
    s.add(Sequence::new(SeqId(id), req, 0, Instant::now()));
}

/// A machine where attention dominates deep contexts, as on a CPU: 2 ms a step, 0.4 ms a
/// token, 0.1 µs an attended position.
fn seconds(shape: StepShape) -> f64 {
    0.002 + 4e-4 * shape.tokens as f64 + 1e-7 * shape.context as f64
}

/// Runs one step, feeding its modelled time to the cost model and a token to every sampler.
fn step(s: &mut Scheduler) -> SchedulerOutput {
    let out = s.schedule();
    let t = seconds(StepShape::of(&out.chunks));
    s.observe_step(&out, Duration::from_secs_f64(t));
    s.update(&out, common::fake_samples(&out));
    out
}

fn chunk_of(out: &SchedulerOutput, id: u64) -> Option<(usize, usize, bool)> {
    out.chunks
        .iter()
        .find(|c| c.seq_id == SeqId(id))
        .map(|c| (c.start, c.len, c.sample))
}

#[test]
fn a_short_request_arriving_during_a_long_prefill_is_scheduled_in_the_next_step() {
    let mut s = scheduler(default_limits());
    add(&mut s, 0, 8000);
    for _ in 0..3 {
        step(&mut s);
    }
    add(&mut s, 1, 8);
    let out = step(&mut s);
    assert_eq!(
        chunk_of(&out, 1),
        Some((0, 8, true)),
        "the short prompt's whole prefill, sampling its first token: {:?}",
        out.chunks
    );
    assert!(
        chunk_of(&out, 0).is_some(),
        "the long prompt still advances"
    );
}

#[test]
fn four_short_requests_each_get_their_first_token_one_step_after_arriving() {
    let mut s = scheduler(default_limits());
    add(&mut s, 0, 8000);
    step(&mut s);
    for id in 1..=4 {
        add(&mut s, id, 8);
        let out = step(&mut s);
        assert_eq!(chunk_of(&out, id).map(|c| c.2), Some(true), "{out:?}");
    }
}

#[test]
fn a_long_prompt_never_takes_more_than_the_threshold_in_a_step() {
    let limits = default_limits();
    let threshold = limits.long_threshold.expect("a default threshold");
    assert_eq!(threshold, MAX_MODEL_LEN * 4 / 100);
    let mut s = scheduler(limits);
    add(&mut s, 0, 3000);
    while s.has_unfinished() {
        let out = step(&mut s);
        for c in &out.chunks {
            assert!(c.len <= threshold, "{c:?}");
        }
    }
}

#[test]
fn deep_in_a_long_context_the_chunk_shrinks_so_a_step_costs_no_more_than_a_full_budget() {
    let mut s = scheduler(default_limits());
    add(&mut s, 0, 8000);
    let budget = EngineConfig::default().max_num_batched_tokens;
    let full = seconds(StepShape::chunk(0, budget));
    let mut deepest = 0;
    while s.has_unfinished() {
        let out = step(&mut s);
        let Some((start, len, _)) = chunk_of(&out, 0) else {
            continue;
        };
        let t = seconds(StepShape::chunk(start, len));
        // The cost model fits this machine exactly, so the bound holds to rounding (a chunk
        // is never cut below one block).
        assert!(
            t <= full * 1.05 || len <= 16,
            "step at {start} of {len} tokens: {t:.3} s against {full:.3} s for a full budget"
        );
        if start > 7000 {
            deepest = deepest.max(len);
        }
    }
    let threshold = default_limits().long_threshold.unwrap();
    assert!(
        (1..threshold * 3 / 4).contains(&deepest),
        "chunks past position 7,000 ({deepest} tokens at most) are well under the threshold \
         {threshold}"
    );
}

#[test]
fn a_second_long_prompt_waits_for_the_long_slot_while_short_ones_overtake_it() {
    let mut s = scheduler(default_limits());
    add(&mut s, 0, 4000);
    step(&mut s);
    add(&mut s, 1, 4000);
    add(&mut s, 2, 8);
    let out = step(&mut s);
    assert!(
        chunk_of(&out, 1).is_none(),
        "one long prefill at a time: {out:?}"
    );
    assert_eq!(chunk_of(&out, 2), Some((0, 8, true)));
}

#[test]
fn without_limits_a_long_prompt_takes_the_whole_budget_and_the_short_one_waits() {
    // Today's behaviour under `UNLIMITED`, which the defaults exist to change.
    let mut s = scheduler(PartialPrefillLimits::UNLIMITED);
    add(&mut s, 0, 8000);
    step(&mut s);
    add(&mut s, 1, 8);
    let out = step(&mut s);
    assert_eq!(chunk_of(&out, 0).map(|c| c.1), Some(512));
    assert!(chunk_of(&out, 1).is_none());
}
