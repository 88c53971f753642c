//! Scheduler and block-manager properties under random arrivals, aborts and lengths,
//! driven without a model (sampled tokens are fake; only the bookkeeping is under test),
//! with one KV cache group or, like Gemma 3, a full group beside sliding ones.

use crate::common;

use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::time::Instant;
use tokenmill_engine::config::{
    KvCacheGroups, PartialPrefillLimits, SchedulingPolicy, SlidingWindow,
};
use tokenmill_engine::kv::block_manager::BlockManager;
use tokenmill_engine::sample::sampled_token::SampledToken;
use tokenmill_engine::sched::scheduler::{Scheduler, SchedulerConfig};
use tokenmill_engine::sched::sequence::Sequence;
use tokenmill_engine::{Request, SamplingParams, SeqId};

#[derive(Debug, Clone)]
enum Event {
    Arrive {
        prompt_len: usize,
        max_tokens: usize,
        priority: i32,
        shared_prefix: bool,
    },
    Abort(usize),
    Step,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (1usize..70, 1usize..12, 0i32..3, any::<bool>()).prop_map(|(prompt_len, max_tokens, priority, shared_prefix)| {
            Event::Arrive { prompt_len, max_tokens, priority, shared_prefix }
        }),
        1 => (0usize..64).prop_map(Event::Abort),
        6 => Just(Event::Step),
    ]
}

#[derive(Debug, Clone)]
struct Setup {
    budget: usize,
    num_blocks: usize,
    block_size: usize,
    max_num_seqs: usize,
    policy: SchedulingPolicy,
    limits: PartialPrefillLimits,
    /// One group of every layer, or one full and two sliding groups.
    groups: KvCacheGroups,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        4usize..64,
        8usize..40,
        prop_oneof![Just(4usize), Just(16)],
        1usize..8,
        any::<bool>(),
        any::<bool>(),
        (1usize..5, 1usize..5),
        proptest::option::of(1usize..24),
    )
        .prop_map(
            |(
                budget,
                num_blocks,
                block_size,
                max_num_seqs,
                priority,
                cap,
                (partial, long),
                window,
            )| {
                let groups = match window.and_then(SlidingWindow::new) {
                    Some(w) => KvCacheGroups::new(&[Some(w), None, Some(w)]),
                    None => KvCacheGroups::single(2),
                };
                Setup {
                    budget,
                    // As many tokens at short context whatever the groups.
                    num_blocks: num_blocks * groups.num_groups(),
                    block_size,
                    max_num_seqs,
                    policy: if priority {
                        SchedulingPolicy::Priority
                    } else {
                        SchedulingPolicy::Fcfs
                    },
                    limits: PartialPrefillLimits {
                        max_partial: partial,
                        max_long: long.min(partial),
                        long_threshold: cap.then_some(budget / 2 + 1),
                    },
                    groups,
                }
            },
        )
}

/// The property checks of one step; `before` is who was running (and with how many
/// blocks) when the step began.
fn check_step(
    s: &Scheduler,
    setup: &Setup,
    before: &[SeqId],
    out: &tokenmill_engine::sched::scheduler_output::SchedulerOutput,
) {
    assert!(
        out.num_tokens() <= setup.budget,
        "budget exceeded: {} > {}",
        out.num_tokens(),
        setup.budget
    );
    for c in out.chunks.iter().filter(|c| c.len > 1) {
        assert!(
            c.len <= setup.limits.chunk_cap(),
            "chunk {c:?} over the threshold"
        );
    }
    let scheduled: HashSet<SeqId> = out.chunks.iter().map(|c| c.seq_id).collect();
    let preempted: HashSet<SeqId> = out.preempted.iter().copied().collect();
    let admitted_new = out.chunks.iter().any(|c| !before.contains(&c.seq_id));
    if admitted_new {
        for id in before {
            assert!(
                scheduled.contains(id) || preempted.contains(id),
                "running {id:?} was skipped while a new prefill was admitted"
            );
        }
    }
    check_ref_counts(s);
    check_window_pages(s, setup);
}

/// A sliding group holds, per sequence, no more pages than its window before a chunk and
/// the chunk take: the pages it no longer sees went back before the step allocated.
fn check_window_pages(s: &Scheduler, setup: &Setup) {
    let bs = setup.block_size;
    for seq in s.running() {
        for (g, table) in seq.block_tables.iter().enumerate() {
            let Some(w) = setup.groups.window(g) else {
                continue;
            };
            let most = (w.get() - 1 + setup.budget).div_ceil(bs) + 1;
            assert!(
                table.held().len() <= most,
                "{:?} holds {} pages in sliding group {g} (window {}), at most {most} expected",
                seq.id,
                table.held().len(),
                w.get()
            );
        }
    }
}

/// Between steps, no more prompts are mid-prefill than the limits allow, and no more of them
/// long; no prefill chunk went past the threshold (checked by `check_step`).
fn check_partial_prefills(s: &Scheduler, limits: &PartialPrefillLimits) {
    let partial: Vec<_> = s
        .running()
        .iter()
        .filter(|q| q.num_computed < q.prompt_len)
        .collect();
    assert!(
        partial.len() <= limits.max_partial,
        "{} partial prefills, limit {}",
        partial.len(),
        limits.max_partial
    );
    let long = partial.iter().filter(|q| limits.is_long(q.gap())).count();
    assert!(
        long <= limits.max_long,
        "{long} long prefills, limit {}",
        limits.max_long
    );
}

/// Every block's ref count equals the number of running sequences' table entries holding
/// it, in every group.
fn check_ref_counts(s: &Scheduler) {
    let bm = s.block_manager();
    bm.check_tables(s.running().iter().map(|q| q.block_tables.as_slice()))
        .unwrap();
    let mut holders: HashMap<usize, u32> = HashMap::new();
    for seq in s.running() {
        for b in seq.block_tables.iter().flat_map(|t| t.held()) {
            *holders.entry(b.index()).or_default() += 1;
        }
    }
    let held: usize = holders.len();
    assert_eq!(
        held + bm.num_free(),
        bm.num_blocks(),
        "held + free != total"
    );
    for seq in s.running() {
        for b in seq.block_tables.iter().flat_map(|t| t.held()) {
            assert_eq!(bm.ref_count(*b), holders[&b.index()], "ref count of {b:?}");
        }
    }
}

fn run(setup: Setup, events: Vec<Event>) {
    let limits_len = setup.num_blocks * setup.block_size;
    let mut s = Scheduler::new(
        SchedulerConfig {
            max_num_batched_tokens: setup.budget,
            max_num_seqs: setup.max_num_seqs,
            prefill_limits: setup.limits,
            policy: setup.policy,
            max_model_len: limits_len,
            eos_token_ids: vec![0],
            target_itl: None,
        },
        BlockManager::with_groups(
            setup.num_blocks,
            setup.block_size,
            true,
            setup.groups.clone(),
        ),
    );
    let alone = setup
        .groups
        .capacity(setup.num_blocks, setup.block_size, setup.budget)
        .one_sequence;
    let mut next = 0u64;
    let mut live: Vec<SeqId> = Vec::new();
    let shared: Vec<u32> = (100..200).collect();
    let step = |s: &mut Scheduler| {
        let before: Vec<SeqId> = s.running().iter().map(|q| q.id).collect();
        let out = s.schedule();
        check_step(s, &setup, &before, &out);
        s.update(&out, common::fake_samples(&out));
        check_ref_counts(s);
        check_partial_prefills(s, &setup.limits);
    };
    for ev in events {
        match ev {
            Event::Arrive {
                prompt_len,
                max_tokens,
                priority,
                shared_prefix,
            } => {
                // Only requests that fit the pool alone are admitted (the engine validates this).
                if prompt_len + max_tokens > alone {
                    continue;
                }
                let prompt: Vec<u32> = if shared_prefix {
                    shared.iter().copied().cycle().take(prompt_len).collect()
                } else {
                    (0..prompt_len as u32)
                        .map(|i| 1000 + next as u32 * 100 + i)
                        .collect()
                };
                let req = Request {
                    prompt,
                    params: SamplingParams {
                        max_tokens,
                        ..SamplingParams::greedy(max_tokens)
                    },
                    priority,
                    constraint: None,
                };
                let id = SeqId(next);
                next += 1;
                s.add(Sequence::new(id, req, 0, Instant::now()));
                live.push(id);
            }
            Event::Abort(i) => {
                if !live.is_empty() {
                    let id = live[i % live.len()];
                    s.abort(id);
                    check_ref_counts(&s);
                }
            }
            Event::Step => step(&mut s),
        }
    }
    // Drain: everything finishes (no deadlock) within a generous bound of steps.
    let mut steps = 0;
    while s.has_unfinished() {
        step(&mut s);
        steps += 1;
        assert!(steps < 10_000, "scheduler made no progress (deadlock)");
    }
    let bm = s.block_manager();
    assert_eq!(
        bm.num_free(),
        bm.num_blocks(),
        "blocks leaked after all requests ended"
    );
    bm.check_invariants().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn budget_is_never_exceeded_running_are_never_skipped_and_blocks_all_return(
        setup in setup(),
        events in proptest::collection::vec(event(), 1..120),
    ) {
        run(setup, events);
    }
}

#[test]
fn a_decode_is_scheduled_before_any_new_prefill() {
    let mut s = Scheduler::new(
        SchedulerConfig {
            max_num_batched_tokens: 8,
            max_num_seqs: 4,
            prefill_limits: PartialPrefillLimits::UNLIMITED,
            policy: SchedulingPolicy::Fcfs,
            max_model_len: 256,
            eos_token_ids: vec![0],
            target_itl: None,
        },
        BlockManager::new(64, 4, true),
    );
    let req = |n: u32| Request {
        prompt: (1..=n).collect(),
        params: SamplingParams::greedy(5),
        priority: 0,
        constraint: None,
    };
    s.add(Sequence::new(SeqId(0), req(8), 0, Instant::now()));
    let out = s.schedule();
    assert_eq!(out.chunks.len(), 1);
    let sampled = vec![(
        SeqId(0),
        vec![SampledToken {
            token_id: 9,
            logprob: None,
            top_logprobs: vec![],
        }],
    )];
    s.update(&out, sampled);
    s.add(Sequence::new(SeqId(1), req(20), 0, Instant::now()));
    let out = s.schedule();
    // The decode (1 token) comes first; the new prompt gets the remaining 7 as a chunk.
    assert_eq!((out.chunks[0].seq_id, out.chunks[0].len), (SeqId(0), 1));
    assert_eq!(
        (
            out.chunks[1].seq_id,
            out.chunks[1].len,
            out.chunks[1].sample
        ),
        (SeqId(1), 7, false)
    );
}

#[test]
fn running_out_of_blocks_preempts_the_most_recently_admitted() {
    let mut s = Scheduler::new(
        SchedulerConfig {
            max_num_batched_tokens: 64,
            max_num_seqs: 4,
            prefill_limits: PartialPrefillLimits::UNLIMITED,
            policy: SchedulingPolicy::Fcfs,
            max_model_len: 64,
            eos_token_ids: vec![0],
            target_itl: None,
        },
        BlockManager::new(4, 4, false),
    );
    let req = || Request {
        prompt: vec![5; 8],
        params: SamplingParams::greedy(8),
        priority: 0,
        constraint: None,
    };
    s.add(Sequence::new(SeqId(0), req(), 0, Instant::now()));
    s.add(Sequence::new(SeqId(1), req(), 0, Instant::now()));
    let fake = |out: &tokenmill_engine::sched::scheduler_output::SchedulerOutput| {
        out.chunks
            .iter()
            .filter(|c| c.sample)
            .map(|c| {
                (
                    c.seq_id,
                    vec![SampledToken {
                        token_id: 9,
                        logprob: None,
                        top_logprobs: vec![],
                    }],
                )
            })
            .collect::<Vec<_>>()
    };
    let out = s.schedule(); // both prompts: 2 blocks each, pool full
    assert_eq!(out.chunks.len(), 2);
    s.update(&out, fake(&out));
    let out = s.schedule(); // seq 0 needs a 3rd block: seq 1 (admitted last) is preempted
    assert_eq!(out.preempted, vec![SeqId(1)]);
    assert_eq!(
        out.chunks.iter().map(|c| c.seq_id).collect::<Vec<_>>(),
        vec![SeqId(0)]
    );
}
