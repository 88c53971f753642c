//! The sampler on hand-made logits: greedy picks the maximum, logprobs come only when
//! asked and equal an f64 log-softmax, penalties and bans rewrite what is sampled but not
//! the reported distribution, and top-k = 1 sampling is greedy whatever the seed; property
//! tests hold random settings to a slow f64 reference.

use tokenmill_engine::sample::sampler::{Sampler, SamplingContext};
use tokenmill_engine::SamplingParams;

fn logits() -> Vec<f32> {
    (0..1000)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
        .collect()
}

fn sample(
    logits: &[f32],
    params: &SamplingParams,
    output: &[u32],
    banned: &[u32],
) -> (u32, Option<f32>, Vec<(u32, f32)>) {
    let ctx = SamplingContext {
        params,
        prompt: &[],
        output,
        seed: 7,
        banned,
        allowed: None,
    };
    let t = Sampler::sample(logits, &ctx);
    (t.token_id, t.logprob, t.top_logprobs)
}

fn log_softmax(logits: &[f32], i: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    logits[i] as f64 - max - sum.ln()
}

#[test]
fn greedy_picks_the_largest_logit_and_reports_no_logprob_unless_asked() {
    let l = logits();
    let best = (0..l.len())
        .max_by(|&a, &b| l[a].total_cmp(&l[b]).then(b.cmp(&a)))
        .unwrap();
    let (id, logprob, top) = sample(&l, &SamplingParams::greedy(1), &[], &[]);
    assert_eq!(id as usize, best);
    assert_eq!(logprob, None);
    assert!(top.is_empty());
}

#[test]
fn logprobs_zero_gives_the_sampled_tokens_logprob_and_no_alternatives() {
    let l = logits();
    let params = SamplingParams {
        logprobs: Some(0),
        ..SamplingParams::greedy(1)
    };
    let (id, logprob, top) = sample(&l, &params, &[], &[]);
    let want = log_softmax(&l, id as usize);
    assert!(
        (logprob.unwrap() as f64 - want).abs() < 1e-4,
        "{logprob:?} vs {want}"
    );
    assert!(top.is_empty());
}

#[test]
fn top_logprobs_are_the_k_most_likely_in_order_with_exact_values() {
    let l = logits();
    let params = SamplingParams {
        logprobs: Some(5),
        ..SamplingParams::greedy(1)
    };
    let (_, _, top) = sample(&l, &params, &[], &[]);
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
    let ids: Vec<u32> = top.iter().map(|&(i, _)| i).collect();
    assert_eq!(
        ids,
        order[..5].iter().map(|&i| i as u32).collect::<Vec<_>>()
    );
    for &(i, lp) in &top {
        assert!((lp as f64 - log_softmax(&l, i as usize)).abs() < 1e-4);
    }
}

#[test]
fn banned_tokens_are_never_sampled_but_the_reported_logprob_is_the_models() {
    let l = logits();
    let (best, _, _) = sample(&l, &SamplingParams::greedy(1), &[], &[]);
    let params = SamplingParams {
        logprobs: Some(0),
        ..SamplingParams::greedy(1)
    };
    let (id, logprob, _) = sample(&l, &params, &[], &[best]);
    assert_ne!(id, best);
    let want = log_softmax(&l, id as usize);
    assert!((logprob.unwrap() as f64 - want).abs() < 1e-4);
}

#[test]
fn a_frequency_penalty_moves_greedy_off_a_repeated_token() {
    let l = logits();
    let (best, _, _) = sample(&l, &SamplingParams::greedy(1), &[], &[]);
    let params = SamplingParams {
        frequency_penalty: 2.0,
        ..SamplingParams::greedy(1)
    };
    // The best logit is 4.99 and the runner-up 4.98: one occurrence costs 2.0.
    let (id, _, _) = sample(&l, &params, &[best], &[]);
    assert_ne!(id, best);
    let (again, _, _) = sample(&l, &params, &[], &[]);
    assert_eq!(again, best, "no output yet, so no penalty");
}

#[test]
fn top_k_one_sampling_is_greedy_at_any_temperature() {
    let l = logits();
    let (best, _, _) = sample(&l, &SamplingParams::greedy(1), &[], &[]);
    for temperature in [0.5, 1.0, 2.0] {
        let params = SamplingParams {
            temperature,
            top_k: Some(1),
            ..SamplingParams::default()
        };
        assert_eq!(sample(&l, &params, &[], &[]).0, best);
    }
}

mod against_a_slow_reference {
    //! Random logits and settings: the sampled token is always one a slow f64 reference
    //! allows (top-k, then the smallest top-p prefix of the full distribution, then min-p
    //! relative to the most likely), and greedy with penalties picks the reference's
    //! penalized argmax.
    use super::*;
    use proptest::prelude::*;

    /// Token ids the settings allow, most likely first; `slack` widens the top-p and min-p
    /// cuts so f32-vs-f64 rounding at a boundary cannot fail the test.
    fn allowed(logits: &[f32], p: &SamplingParams, slack: f64) -> Vec<usize> {
        let scaled: Vec<f64> = logits.iter().map(|&l| (l / p.temperature) as f64).collect();
        let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = scaled.iter().map(|s| (s - max).exp()).sum();
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| scaled[b].total_cmp(&scaled[a]).then(a.cmp(&b)));
        order.truncate(p.top_k.unwrap_or(order.len()));
        let prob = |i: usize| (scaled[i] - max).exp() / total;
        let mut kept = Vec::new();
        let mut cumulative = 0.0;
        for &i in &order {
            kept.push(i);
            cumulative += prob(i);
            if cumulative >= p.top_p as f64 + slack {
                break;
            }
        }
        let top = prob(kept[0]);
        kept.retain(|&i| prob(i) >= p.min_p as f64 * top - slack);
        kept
    }

    fn logits_strategy() -> impl Strategy<Value = Vec<f32>> {
        prop::collection::vec(-8.0f32..8.0, 2..80)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn sampled_tokens_stay_inside_top_k_top_p_and_min_p(
            logits in logits_strategy(),
            temperature in 0.1f32..2.0,
            top_k in prop::option::of(1usize..20),
            top_p in 0.05f32..=1.0,
            min_p in prop_oneof![Just(0.0f32), 0.0f32..0.5],
            seed in any::<u64>(),
            step in 0usize..50,
        ) {
            let params = SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                ..SamplingParams::default()
            };
            let output = vec![0u32; step];
            let ctx = SamplingContext {
                params: &params,
                prompt: &[],
                output: &output,
                seed,
                allowed: None,
            banned: &[],
            };
            let id = Sampler::sample(&logits, &ctx).token_id as usize;
            let ok = allowed(&logits, &params, 1e-5);
            prop_assert!(ok.contains(&id), "{id} not in {ok:?}");
        }

        #[test]
        fn greedy_with_penalties_picks_the_penalized_argmax(
            logits in logits_strategy(),
            output in prop::collection::vec(0u32..80, 0..12),
            prompt in prop::collection::vec(0u32..80, 0..12),
            repetition_penalty in 1.0f32..2.0,
            frequency_penalty in -1.0f32..2.0,
            presence_penalty in -1.0f32..2.0,
        ) {
            let params = SamplingParams {
                repetition_penalty,
                frequency_penalty,
                presence_penalty,
                ..SamplingParams::greedy(1)
            };
            let ctx = SamplingContext {
                params: &params,
                prompt: &prompt,
                output: &output,
                seed: 0,
                allowed: None,
            banned: &[],
            };
            let id = Sampler::sample(&logits, &ctx).token_id;
            // The reference: each seen token's logit rewritten once, in the documented order.
            let mut want = logits.clone();
            for (t, l) in want.iter_mut().enumerate() {
                let t = t as u32;
                let in_output = output.iter().filter(|&&o| o == t).count();
                if in_output == 0 && !prompt.contains(&t) {
                    continue;
                }
                *l = if *l > 0.0 { *l / repetition_penalty } else { *l * repetition_penalty };
                if in_output > 0 {
                    *l -= frequency_penalty * in_output as f32 + presence_penalty;
                }
            }
            let best = (0..want.len()).fold(0, |b, i| if want[i] > want[b] { i } else { b });
            prop_assert_eq!(id as usize, best);
        }
    }
}

#[test]
fn a_logit_bias_moves_the_greedy_pick_but_not_the_reported_logprobs() {
    let l = logits();
    let (best, _, _) = sample(&l, &SamplingParams::greedy(1), &[], &[]);
    let params = SamplingParams {
        logprobs: Some(0),
        logit_bias: tokenmill_engine::sample::logit_bias::LogitBias::new([
            (best, -100.0),
            (3, 100.0),
        ])
        .unwrap(),
        ..SamplingParams::greedy(1)
    };
    let (id, logprob, _) = sample(&l, &params, &[], &[]);
    assert_eq!(id, 3);
    let want = log_softmax(&l, 3);
    assert!((logprob.unwrap() as f64 - want).abs() < 1e-4);
}

mod argmax_against_a_plain_scan {
    //! The lane-wise argmax is a vectorisable rewrite of a one-at-a-time scan: the first
    //! greatest element, NaNs never picked, and 0 when nothing beats element 0.
    use proptest::prelude::*;
    use tokenmill_engine::sample::sampler::argmax;

    fn scan(logits: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &l) in logits.iter().enumerate() {
            if l > logits[best] {
                best = i;
            }
        }
        best as u32
    }

    /// Few distinct values (so ties are common), infinities and NaNs.
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => (-3i32..3).prop_map(|v| v as f32),
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NEG_INFINITY),
            2 => -1e3f32..1e3,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn argmax_equals_a_plain_scan_on_ties_nans_and_infinities(
            logits in prop::collection::vec(value(), 0..100),
        ) {
            prop_assert_eq!(argmax(&logits), scan(&logits));
        }
    }

    #[test]
    fn argmax_takes_the_first_of_equal_maxima_in_a_vocab_sized_row() {
        let mut logits = vec![0.0f32; 151_936];
        for at in [151_935, 70_001, 70_000, 17] {
            logits[at] = 5.0;
        }
        assert_eq!(argmax(&logits), 17);
        logits[0] = f32::NAN;
        assert_eq!(argmax(&logits), 0);
    }
}
