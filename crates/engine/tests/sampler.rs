//! The sampler on hand-made logits: greedy picks the maximum, logprobs come only when
//! asked and equal an f64 log-softmax, penalties and bans rewrite what is sampled but not
//! the reported distribution, and top-k = 1 sampling is greedy whatever the seed.

use tokenmill_engine::sampler::{Sampler, SamplingContext};
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
