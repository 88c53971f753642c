//! Speculative decoding never changes an answer: the real model, greedy and seeded
//! sampling, alone and in a batch of 16 with mixed lengths, gives the same ids, finish
//! reasons and logprobs (to the bit) with drafts verified as without them, and leaves the
//! same blocks in the prefix cache; and the drafts really were verified and accepted, so the
//! comparison is not between two plain runs.

use crate::common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokenmill_engine::config::{KvCacheDtype, SpeculativeConfig};
use tokenmill_engine::sample::sampled_token::SampledToken;
use tokenmill_engine::{Completion, Engine, EngineConfig, Request, SamplingParams};

const TOP_LOGPROBS: usize = 3;

/// 16 prompts of mixed lengths (12–150 tokens) that repeat themselves, as input-grounded
/// prompts do: a seeded passage of real-text tokens, then its start again, so prompt lookup
/// finds drafts and the model, continuing the copy, accepts many.
fn prompts() -> Vec<Vec<u32>> {
    let golden = common::golden();
    let mut rng = StdRng::seed_from_u64(38);
    (0..16)
        .map(|i| {
            let base = &golden.cases[i % golden.cases.len()].prompt_ids;
            let len = 6 + (i * 29) % 70;
            let mut passage: Vec<u32> = base.iter().copied().take(len).collect();
            while passage.len() < len {
                passage.push(rng.random_range(200..20_000));
            }
            let again = passage.len() / 2;
            let mut p = passage.clone();
            p.extend_from_slice(&passage[..again]);
            p
        })
        .collect()
}

fn engine(kv: KvCacheDtype, speculative: Option<&str>, keep_all: bool) -> Engine {
    let mut e = common::load_engine(EngineConfig {
        kv_cache_dtype: kv,
        num_kv_blocks: Some(96),
        max_num_batched_tokens: 64,
        max_num_seqs: 16,
        speculative: speculative.map(|s| SpeculativeConfig::from_json(s).unwrap()),
        ..EngineConfig::default()
    });
    if keep_all {
        e.keep_all_drafts();
    }
    e
}

const NGRAM: &str =
    r#"{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}"#;

fn requests(params: impl Fn(usize) -> SamplingParams) -> Vec<Request> {
    prompts()
        .into_iter()
        .enumerate()
        .map(|(i, prompt)| Request {
            prompt,
            params: params(i),
            priority: 0,
            constraint: None,
        })
        .collect()
}

fn alone(e: &mut Engine, reqs: Vec<Request>) -> Vec<Completion> {
    reqs.into_iter()
        .map(|r| e.generate(vec![r]).unwrap().remove(0))
        .collect()
}

fn bits(t: &SampledToken) -> (u32, Option<u32>, Vec<(u32, u32)>) {
    (
        t.token_id,
        t.logprob.map(f32::to_bits),
        t.top_logprobs
            .iter()
            .map(|&(id, l)| (id, l.to_bits()))
            .collect(),
    )
}

fn assert_same(plain: &[Completion], spec: &[Completion], what: &str) {
    assert_eq!(plain.len(), spec.len());
    for (i, (a, b)) in plain.iter().zip(spec).enumerate() {
        assert_eq!(a.token_ids(), b.token_ids(), "{what}: request {i} ids");
        assert_eq!(
            a.finish_reason, b.finish_reason,
            "{what}: request {i} finish"
        );
        let (x, y): (Vec<_>, Vec<_>) = (
            a.tokens.iter().map(bits).collect(),
            b.tokens.iter().map(bits).collect(),
        );
        assert_eq!(x, y, "{what}: request {i} logprobs");
    }
}

/// SuffixDecoding with its defaults; the requests run alone take in each other's outputs.
const SUFFIX: &str = r#"{"method":"suffix","num_speculative_tokens":4}"#;

const DRAFT_MODEL_2_LAYERS: &str =
    r#"{"method":"draft_model","num_speculative_tokens":3,"hf_overrides":{"num_hidden_layers":2}}"#;

/// Every method, as `--speculative-config` JSON (the draft model's path filled in).
fn methods() -> Vec<(&'static str, String)> {
    let model = common::model_path().display().to_string();
    let draft: serde_json::Value = serde_json::from_str(DRAFT_MODEL_2_LAYERS).unwrap();
    let mut draft = draft.as_object().unwrap().clone();
    draft.insert("model".into(), model.into());
    vec![
        ("ngram", NGRAM.to_owned()),
        ("suffix", SUFFIX.to_owned()),
        ("draft_model", serde_json::Value::Object(draft).to_string()),
    ]
}

/// Runs the workload without speculation, then with each method alone and batched, every
/// draft verified: the step cost model decides from measured step times how many to verify,
/// so on a loaded machine it may verify almost none (and a batch that is compute-bound none
/// at all), which would leave the acceptance checked below to the machine's load.
fn check(kv: KvCacheDtype, params: impl Fn(usize) -> SamplingParams + Copy, what: &str) {
    let mut reference = engine(kv, None, false);
    let plain = alone(&mut reference, requests(params));
    let mut cached = reference.cached_block_hashes();
    cached.sort_unstable();
    for (method, json) in methods() {
        let mut spec = engine(kv, Some(&json), true);
        let spec_alone = alone(&mut spec, requests(params));
        assert_same(&plain, &spec_alone, &format!("{what}, {method}, alone"));
        // The prefix cache took in accepted tokens only: the same blocks as without drafts.
        let mut spec_cached = spec.cached_block_hashes();
        spec_cached.sort_unstable();
        assert_eq!(cached, spec_cached, "{what}, {method}: prefix-cache blocks");
        let s = spec.stats().spec_decode;
        // A two-layer truncation drafts badly; its exactness is what is checked here (see
        // the test with the target itself as the draft for its drafting).
        let accepted = method == "draft_model" || s.num_accepted_tokens > 0;
        assert!(
            s.num_drafts > 0 && accepted,
            "{what}, {method}: alone, drafts were verified and accepted: {s:?}"
        );

        let mut spec = engine(kv, Some(&json), true);
        let spec_batched = spec.generate(requests(params)).unwrap();
        assert_same(
            &plain,
            &spec_batched,
            &format!("{what}, {method}, batch of 16"),
        );
        let s = spec.stats().spec_decode;
        let accepted = method == "draft_model" || s.num_accepted_tokens > 0;
        assert!(
            accepted && s.num_accepted_tokens < s.num_draft_tokens,
            "{what}, {method}: batched, drafts verified, some rejected: {s:?}"
        );
    }
}

fn greedy(i: usize) -> SamplingParams {
    SamplingParams {
        logprobs: Some(TOP_LOGPROBS),
        ..SamplingParams::greedy(12 + (i * 7) % 20)
    }
}

#[test]
fn greedy_ids_and_logprobs_are_identical_with_and_without_speculation() {
    crate::common::skip_without_model!();
    check(KvCacheDtype::Auto, greedy, "greedy");
}

#[test]
fn greedy_ids_and_logprobs_on_the_q8_0_kv_cache_are_identical_with_and_without_speculation() {
    crate::common::skip_without_model!();
    check(KvCacheDtype::Q8_0, greedy, "greedy, q8_0");
}

#[test]
fn greedy_ids_and_logprobs_on_the_fp8_kv_cache_are_identical_with_and_without_speculation() {
    crate::common::skip_without_model!();
    check(KvCacheDtype::Fp8, greedy, "greedy, fp8");
}

#[test]
fn seeded_sampling_with_penalties_is_identical_with_and_without_speculation() {
    crate::common::skip_without_model!();
    check(
        KvCacheDtype::Auto,
        |i| SamplingParams {
            temperature: 0.7,
            top_p: 0.95,
            seed: Some(500 + i as u64),
            repetition_penalty: if i % 2 == 0 { 1.0 } else { 1.1 },
            min_tokens: if i % 3 == 0 { 6 } else { 0 },
            logprobs: Some(TOP_LOGPROBS),
            max_tokens: 24,
            ..SamplingParams::default()
        },
        "seeded",
    );
}

#[test]
fn a_draft_model_equal_to_the_target_has_every_greedy_draft_accepted() {
    crate::common::skip_without_model!();
    // Batch-invariant kernels: the draft computes the target's own logits, so its greedy
    // drafts are the target's tokens, all of them accepted.
    let json = format!(
        r#"{{"method":"draft_model","num_speculative_tokens":3,"model":{:?}}}"#,
        common::model_path().display().to_string()
    );
    let reqs = || {
        requests(|_| SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(16)
        })
        .into_iter()
        .take(3)
        .collect::<Vec<_>>()
    };
    let plain = alone(&mut engine(KvCacheDtype::Auto, None, false), reqs());
    let mut spec = engine(KvCacheDtype::Auto, Some(&json), true);
    let out = alone(&mut spec, reqs());
    for (a, b) in plain.iter().zip(&out) {
        assert_eq!(a.token_ids(), b.token_ids());
    }
    let s = spec.stats().spec_decode;
    assert!(s.num_draft_tokens > 0, "{s:?}");
    assert_eq!(s.num_accepted_tokens, s.num_draft_tokens, "{s:?}");
}

#[test]
fn a_request_that_opts_out_verifies_no_drafts() {
    crate::common::skip_without_model!();
    let mut spec = engine(KvCacheDtype::Auto, Some(NGRAM), true);
    let reqs = requests(|_| SamplingParams {
        speculative: false,
        ignore_eos: true,
        ..SamplingParams::greedy(16)
    });
    let out = alone(&mut spec, reqs);
    assert!(out.iter().all(|c| c.tokens.len() == 16));
    assert_eq!(spec.stats().spec_decode.num_drafts, 0);
}
