//! The real model batched: many requests through a tiny token budget (chunked prefill
//! over many steps) and a tiny KV pool (preemption) give exactly the tokens each gives
//! alone, with the same logprobs to the bit (ARCHITECTURE.md: a token's result does not
//! depend on what is batched with it); a shared prefix is computed once. The default KV
//! cache is f16; the f32, q8_0 and fp8 caches are checked too.

use crate::common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::config::WeightMode;
use tokenmill_engine::{Completion, EngineConfig, Request, SamplingParams};

/// 32 prompts of mixed lengths (5–100 tokens) built from the golden prompts' real text
/// tokens plus seeded ordinary-vocabulary tokens.
fn prompts() -> Vec<Vec<u32>> {
    let golden = common::golden();
    let mut rng = StdRng::seed_from_u64(42);
    (0..32)
        .map(|i| {
            let base = &golden.cases[i % golden.cases.len()].prompt_ids;
            let len = 5 + (i * 37) % 96;
            let mut p: Vec<u32> = (0..len.saturating_sub(base.len()))
                .map(|_| rng.random_range(200..20_000))
                .collect();
            p.extend(base.iter().take(len));
            p
        })
        .collect()
}

fn alone(
    prompts: &[Vec<u32>],
    kv: KvCacheDtype,
    params: impl Fn(usize) -> SamplingParams,
) -> Vec<Completion> {
    alone_on(WeightMode::Quantized, prompts, kv, params)
}

fn alone_on(
    weights: WeightMode,
    prompts: &[Vec<u32>],
    kv: KvCacheDtype,
    params: impl Fn(usize) -> SamplingParams,
) -> Vec<Completion> {
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(64),
        kv_cache_dtype: kv,
        enable_prefix_caching: false,
        weight_mode: weights,
        ..EngineConfig::default()
    });
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let req = Request {
                prompt: p.clone(),
                params: params(i),
                priority: 0,
                constraint: None,
            };
            engine.generate(vec![req]).unwrap().remove(0)
        })
        .collect()
}

fn together(
    prompts: &[Vec<u32>],
    kv: KvCacheDtype,
    params: impl Fn(usize) -> SamplingParams,
) -> (Vec<Completion>, u64) {
    // 24 tokens a step (24 running at most) and 12 blocks of 16 for 32 requests needing up to
    // 7 blocks each.
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(12),
        kv_cache_dtype: kv,
        max_num_batched_tokens: 24,
        max_num_seqs: 24,
        ..EngineConfig::default()
    });
    let done = engine.generate(requests(prompts, params)).unwrap();
    (done, engine.stats().num_preemptions)
}

fn requests(prompts: &[Vec<u32>], params: impl Fn(usize) -> SamplingParams) -> Vec<Request> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| Request {
            prompt: p.clone(),
            params: params(i),
            priority: 0,
            constraint: None,
        })
        .collect()
}

/// Alternatives asked for with every token, so logprobs are compared and not only ids.
const TOP_LOGPROBS: usize = 5;

/// The same tokens, finish reasons, logprobs and top logprobs, bit for bit: equal ids
/// alone would pass with logits that drift by a rounding step, and so would an `==` on
/// floats that treats -0.0 and 0.0 alike.
fn assert_same(alone: &[Completion], together: &[Completion]) {
    assert_eq!(alone.len(), together.len());
    for (i, (a, b)) in alone.iter().zip(together).enumerate() {
        assert_eq!(
            a.token_ids(),
            b.token_ids(),
            "request {i} differs when batched"
        );
        assert_eq!(
            a.finish_reason, b.finish_reason,
            "request {i} finish reason"
        );
        for (step, (x, y)) in a.tokens.iter().zip(&b.tokens).enumerate() {
            let bits = |t: &tokenmill_engine::sample::sampled_token::SampledToken| {
                let lp = t.logprob.expect("logprobs were requested");
                assert_eq!(t.top_logprobs.len(), TOP_LOGPROBS);
                let top: Vec<(u32, u32)> = t
                    .top_logprobs
                    .iter()
                    .map(|&(id, l)| (id, l.to_bits()))
                    .collect();
                (lp.to_bits(), top)
            };
            assert_eq!(
                bits(x),
                bits(y),
                "request {i} step {step}: logprobs differ when batched ({x:?} alone, {y:?} batched)"
            );
        }
    }
}

fn greedy_with_logprobs(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        logprobs: Some(TOP_LOGPROBS),
        ..SamplingParams::greedy(max_tokens)
    }
}

fn greedy_alone_and_batched(kv: KvCacheDtype) {
    let prompts = prompts();
    let params = |_| greedy_with_logprobs(10);
    let (batched, preemptions) = together(&prompts, kv, params);
    assert!(
        preemptions > 0,
        "the tiny pool should have forced preemption"
    );
    assert_same(&alone(&prompts, kv, params), &batched);
}

#[test]
fn greedy_outputs_are_identical_alone_and_batched_with_chunking_and_preemption() {
    crate::common::skip_without_model!();
    greedy_alone_and_batched(KvCacheDtype::Auto);
}

#[test]
fn greedy_outputs_with_the_q8_0_kv_cache_are_identical_alone_and_batched() {
    crate::common::skip_without_model!();
    greedy_alone_and_batched(KvCacheDtype::Q8_0);
}

#[test]
fn greedy_outputs_with_the_fp8_kv_cache_are_identical_alone_and_batched() {
    crate::common::skip_without_model!();
    greedy_alone_and_batched(KvCacheDtype::Fp8);
}

#[test]
fn greedy_outputs_with_the_f32_kv_cache_are_identical_alone_and_batched() {
    crate::common::skip_without_model!();
    greedy_alone_and_batched(KvCacheDtype::F32);
}

#[test]
fn seeded_sampling_is_reproducible_alone_and_batched() {
    crate::common::skip_without_model!();
    let prompts = prompts();
    let params = |i: usize| SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        top_k: Some(50),
        seed: Some(1000 + i as u64),
        max_tokens: 10,
        logprobs: Some(TOP_LOGPROBS),
        ..SamplingParams::default()
    };
    let (batched, preemptions) = together(&prompts, KvCacheDtype::Auto, params);
    assert!(preemptions > 0);
    let solo = alone(&prompts, KvCacheDtype::Auto, params);
    assert_same(&solo, &batched);
    // Different seeds really sample differently (the test could not pass by being greedy).
    let greedy = alone(&prompts[..4], KvCacheDtype::Auto, |_| {
        SamplingParams::greedy(10)
    });
    assert!(greedy
        .iter()
        .zip(&solo)
        .any(|(g, s)| g.token_ids() != s.token_ids()));
}

#[test]
fn a_shared_200_token_prefix_is_computed_once_and_changes_nothing() {
    crate::common::skip_without_model!();
    let mut rng = StdRng::seed_from_u64(7);
    let prefix: Vec<u32> = (0..200).map(|_| rng.random_range(200..20_000)).collect();
    let with_suffix = |s: &[u32]| prefix.iter().chain(s).copied().collect::<Vec<u32>>();
    let (a, b) = (
        with_suffix(&[1, 4093, 198, 1780]),
        with_suffix(&[1, 4093, 198, 19161, 253]),
    );
    let mut engine = common::load_engine(EngineConfig {
        num_kv_blocks: Some(64),
        ..EngineConfig::default()
    });
    let params = greedy_with_logprobs(8);
    let first = engine
        .generate(vec![Request {
            prompt: a,
            params: params.clone(),
            priority: 0,
            constraint: None,
        }])
        .unwrap();
    let second = engine
        .generate(vec![Request {
            prompt: b.clone(),
            params: params.clone(),
            priority: 0,
            constraint: None,
        }])
        .unwrap();
    assert_eq!(first[0].cached_prompt_tokens, 0);
    // 200 shared tokens = 12 full blocks of 16 (192 tokens) reused; only the rest computed.
    assert_eq!(second[0].cached_prompt_tokens, 192);
    let stats = engine.stats();
    assert_eq!(stats.prefix_cache_hits, 192);
    let mut fresh = common::load_engine(EngineConfig {
        num_kv_blocks: Some(64),
        enable_prefix_caching: false,
        ..EngineConfig::default()
    });
    let reference = fresh
        .generate(vec![Request {
            prompt: b,
            params,
            priority: 0,
            constraint: None,
        }])
        .unwrap();
    assert_same(&second, &reference);
}

#[test]
fn step_times_count_every_step_and_put_the_forward_pass_in_its_own_phase() {
    crate::common::skip_without_model!();
    let mut engine = common::load_engine(EngineConfig {
        max_num_batched_tokens: 24,
        max_num_seqs: 24,
        ..EngineConfig::default()
    });
    let prompts = &prompts()[..4];
    let max_tokens = 6;
    let reqs = prompts
        .iter()
        .map(|p| Request {
            prompt: p.clone(),
            params: SamplingParams::greedy(max_tokens),
            priority: 0,
            constraint: None,
        })
        .collect();
    let before = engine.step_times();
    engine.generate(reqs).unwrap();
    let t = engine.step_times().since(&before);
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    // Every prompt token needs a slot in some step's 24-token budget, and every output
    // token after the first needs a step of its own.
    let least = prompt_tokens.div_ceil(24).max(max_tokens) as u64;
    assert!(t.steps >= least, "{} steps, at least {least}", t.steps);
    assert!(t.forward > t.bookkeeping(), "{t:?}");
    assert_eq!(t.total(), t.schedule + t.forward + t.sample + t.update);
    assert!(t.summary().contains(&format!("{} steps", t.steps)));
}

/// An ITL target no step can meet (1 ms): prefill is rationed to a block every few steps,
/// yet every request finishes with exactly the tokens and logprobs it gets alone.
#[test]
fn an_itl_target_moves_prefill_between_steps_but_changes_no_token_or_logprob() {
    crate::common::skip_without_model!();
    let prompts: Vec<Vec<u32>> = prompts().into_iter().take(12).collect();
    let params = |_| greedy_with_logprobs(8);
    let run = |target_itl| {
        // With a target, the engine's calibration at load has trained the cost model.
        let mut engine = common::load_engine(EngineConfig {
            max_num_batched_tokens: 64,
            max_num_seqs: 4,
            target_itl,
            ..EngineConfig::default()
        });
        let done = engine.generate(requests(&prompts, params)).unwrap();
        (done, engine.stats())
    };
    let (_, plain) = run(None);
    let (done, rationed) = run(Some(std::time::Duration::from_millis(1)));
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    assert_eq!(plain.prefill_tokens, prompt_tokens as u64);
    assert_eq!(rationed.prefill_tokens, prompt_tokens as u64);
    assert!(
        2 * rationed.step_seconds.count > 3 * plain.step_seconds.count,
        "{} steps with the target, {} without: prefill was not rationed",
        rationed.step_seconds.count,
        plain.step_seconds.count
    );
    assert!(
        rationed.step_prediction_error.is_some(),
        "the cost model never predicted"
    );
    assert_same(&alone(&prompts, KvCacheDtype::Auto, params), &done);
}

fn bits(t: &tokenmill_engine::sample::sampled_token::SampledToken) -> (u32, u32, Vec<(u32, u32)>) {
    let top = t.top_logprobs.iter().map(|&(id, l)| (id, l.to_bits()));
    (t.token_id, t.logprob.unwrap().to_bits(), top.collect())
}

fn with_prompt_logprobs(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        prompt_logprobs: Some(TOP_LOGPROBS),
        ..greedy_with_logprobs(max_tokens)
    }
}

#[test]
fn prompt_logprobs_score_every_prompt_token_once_alone_and_batched_with_preemption() {
    crate::common::skip_without_model!();
    let prompts = prompts();
    let params = |i: usize| with_prompt_logprobs(1 + i % 8);
    let (batched, preemptions) = together(&prompts, KvCacheDtype::Auto, params);
    assert!(preemptions > 0);
    let solo = alone(&prompts, KvCacheDtype::Auto, params);
    assert_same(&solo, &batched);
    for (i, ((prompt, a), b)) in prompts.iter().zip(&solo).zip(&batched).enumerate() {
        let scored: Vec<u32> = a.prompt_logprobs.iter().map(|t| t.token_id).collect();
        assert_eq!(scored, prompt[1..], "request {i} scores other tokens");
        let a: Vec<_> = a.prompt_logprobs.iter().map(bits).collect();
        let b: Vec<_> = b.prompt_logprobs.iter().map(bits).collect();
        assert_eq!(a, b, "request {i}: prompt logprobs differ when batched");
    }
}

#[test]
fn prompt_logprobs_score_a_generated_continuation_as_generating_it_did() {
    crate::common::skip_without_model!();
    teacher_forced_scores_equal_generated_ones(WeightMode::Quantized, KvCacheDtype::Auto);
}

/// The exact path too: its dense matmul sums each output in one order whatever the batch,
/// so a prompt token scored inside a prefill gets a decoded token's very bits.
#[test]
fn on_the_f32_path_prompt_logprobs_score_a_continuation_as_generating_it_did() {
    crate::common::skip_without_model!();
    teacher_forced_scores_equal_generated_ones(WeightMode::F32, KvCacheDtype::F32);
}

fn teacher_forced_scores_equal_generated_ones(weights: WeightMode, kv: KvCacheDtype) {
    let prompts = &prompts()[..6];
    let generated = alone_on(weights, prompts, kv, |_| greedy_with_logprobs(8));
    let forced: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&generated)
        .map(|(p, g)| p.iter().copied().chain(g.token_ids()).collect())
        .collect();
    let scored = alone_on(weights, &forced, kv, |_| with_prompt_logprobs(1));
    for (i, ((prompt, g), s)) in prompts.iter().zip(&generated).zip(&scored).enumerate() {
        let want: Vec<_> = g.tokens.iter().map(bits).collect();
        let got: Vec<_> = s.prompt_logprobs[prompt.len() - 1..]
            .iter()
            .map(bits)
            .collect();
        assert_eq!(got, want, "request {i}: teacher-forced scores differ");
    }
}
