//! The ITL target (`SchedulerConfig::target_itl`) against a simulated model runner whose
//! step time is a known noisy function of the step's shape: the cost model converges,
//! steps stay under the target whenever the decodes alone fit it, no prompt starves, and
//! the hard budget holds.

use crate::common;

use proptest::prelude::*;
use std::time::{Duration, Instant};
use tokenmill_engine::config::{PartialPrefillLimits, SchedulingPolicy};
use tokenmill_engine::kv::block_manager::BlockManager;
use tokenmill_engine::sched::scheduler::{Scheduler, SchedulerConfig, MAX_STARVED_STEPS};
use tokenmill_engine::sched::scheduler_output::SchedulerOutput;
use tokenmill_engine::sched::sequence::Sequence;
use tokenmill_engine::sched::step_cost_model::StepShape;
use tokenmill_engine::{Request, SamplingParams, SeqId};

/// The simulated machine: 5 ms a step, 0.1 ms a token, 4 µs per 1,000 attended positions,
/// 20 µs a sequence, times a noise factor in [1 - noise, 1 + noise].
fn step_seconds(shape: StepShape, noise: f64, rng: &mut u64) -> f64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let u = (*rng >> 11) as f64 / (1u64 << 53) as f64;
    let exact =
        0.005 + 1e-4 * shape.tokens as f64 + 4e-9 * shape.context as f64 + 2e-5 * shape.seqs as f64;
    exact * (1.0 + noise * (2.0 * u - 1.0))
}

fn scheduler(budget: usize, max_num_seqs: usize, target_ms: Option<u64>) -> Scheduler {
    Scheduler::new(
        SchedulerConfig {
            max_num_batched_tokens: budget,
            max_num_seqs,
            prefill_limits: PartialPrefillLimits::UNLIMITED,
            policy: SchedulingPolicy::Fcfs,
            max_model_len: 4096,
            eos_token_ids: vec![0],
            target_itl: target_ms.map(Duration::from_millis),
        },
        BlockManager::new(2048, 16, false),
    )
}

fn add(s: &mut Scheduler, id: u64, prompt_len: usize, max_tokens: usize) {
    let req = Request {
        prompt: (0..prompt_len as u32).map(|i| 1 + i % 1000).collect(),
        params: SamplingParams::greedy(max_tokens),
        priority: 0,
        constraint: None,
    };
    s.add(Sequence::new(SeqId(id), req, 0, Instant::now()));
}

/// One step: schedule, "run" it on the simulated machine, feed the time back, update.
/// Returns the output and its simulated seconds.
fn step(s: &mut Scheduler, noise: f64, rng: &mut u64) -> (SchedulerOutput, f64) {
    let out = s.schedule();
    let seconds = step_seconds(StepShape::of(&out.chunks), noise, rng);
    s.observe_step(&out, Duration::from_secs_f64(seconds));
    s.update(&out, common::fake_samples(&out));
    (out, seconds)
}

#[test]
fn the_cost_model_learns_the_simulated_step_time_within_a_few_percent() {
    let (mut s, mut rng) = (scheduler(512, 64, None), 1u64);
    for id in 0..48 {
        add(&mut s, id, 100 + (id as usize * 37) % 400, 32);
    }
    for _ in 0..200 {
        step(&mut s, 0.02, &mut rng);
    }
    let model = s.step_cost_model();
    for (start, len, decodes) in [(0, 512, 0), (300, 200, 40), (0, 0, 64), (1000, 64, 8)] {
        let shape = (0..decodes)
            .map(|i| StepShape::chunk(200 + i, 1))
            .fold(StepShape::chunk(start, len), StepShape::plus);
        let want = step_seconds(shape, 0.0, &mut rng);
        let got = model.predict(shape).expect("fitted after 200 steps");
        assert!(
            (got - want).abs() <= 0.05 * want,
            "shape {shape:?}: predicted {got}, true {want}"
        );
    }
}

#[test]
fn steps_stay_under_the_target_while_prompts_keep_arriving() {
    // 30 ms: 32 decodes cost ~12 ms, a full 512-token budget ~60 ms.
    let (mut s, mut rng) = (scheduler(512, 64, Some(30)), 7u64);
    let mut next = 0;
    let (mut over, mut after_warmup) = (0, 0);
    for i in 0..400 {
        if i % 3 == 0 && next < 120 {
            add(&mut s, next, 300, 48);
            next += 1;
        }
        let (out, seconds) = step(&mut s, 0.05, &mut rng);
        if i >= 40 && out.predicted_seconds.is_some() {
            after_warmup += 1;
            over += usize::from(seconds > 0.030 * 1.1);
        }
    }
    assert!(after_warmup > 300, "{after_warmup}");
    // Noise of ±5% plus the fit's error; one step in fifty may be over by 10%.
    assert!(
        over * 50 <= after_warmup,
        "{over} of {after_warmup} steps over 33 ms"
    );
    let mut left = 0;
    while s.has_unfinished() {
        step(&mut s, 0.05, &mut rng);
        left += 1;
        assert!(left < 5000, "requests never finished");
    }
}

#[test]
fn a_waiting_prompt_gets_a_block_even_when_decodes_alone_exceed_the_target() {
    // 64 decodes cost ~11.5 ms; the target of 8 ms can never be met, prefill included.
    let (mut s, mut rng) = (scheduler(512, 128, Some(8)), 3u64);
    for id in 0..64 {
        add(&mut s, id, 16, 400);
    }
    while s.running().len() < 64 || s.running().iter().any(|q| q.gap() > 1) {
        step(&mut s, 0.0, &mut rng);
    }
    for _ in 0..40 {
        step(&mut s, 0.0, &mut rng);
    }
    add(&mut s, 1000, 64, 4);
    let mut steps = 0;
    let mut prefilled = 0;
    while prefilled < 64 {
        let (out, _) = step(&mut s, 0.0, &mut rng);
        prefilled += out
            .chunks
            .iter()
            .filter(|c| c.seq_id == SeqId(1000))
            .map(|c| c.len)
            .sum::<usize>();
        steps += 1;
        // A block (16 tokens) at least every MAX_STARVED_STEPS steps.
        assert!(
            steps <= 4 * MAX_STARVED_STEPS,
            "64 tokens took {steps} steps"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_hard_budget_holds_and_every_request_finishes_under_any_target(
        budget in 16usize..600,
        target_ms in 1u64..80,
        arrivals in proptest::collection::vec((0usize..6, 1usize..700, 1usize..40), 1..60),
    ) {
        let (mut s, mut rng) = (scheduler(budget, 16, Some(target_ms)), 11u64);
        for (id, (steps_before, prompt_len, max_tokens)) in arrivals.into_iter().enumerate() {
            for _ in 0..steps_before {
                let (out, _) = step(&mut s, 0.1, &mut rng);
                prop_assert!(out.num_tokens() <= budget);
            }
            add(&mut s, id as u64, prompt_len, max_tokens);
        }
        let mut steps = 0;
        while s.has_unfinished() {
            let (out, _) = step(&mut s, 0.1, &mut rng);
            prop_assert!(out.num_tokens() <= budget);
            prop_assert!(out.chunks.iter().all(|c| c.len > 0));
            let allowance = out.prefill_allowance.expect("a target is set");
            prop_assert!(out.prefill_tokens <= allowance.min(out.num_tokens()));
            steps += 1;
            prop_assert!(steps < 20_000, "no progress");
        }
    }
}
