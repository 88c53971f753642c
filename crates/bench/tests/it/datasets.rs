//! Prompts as the server receives them: exact random lengths, token-id fallback, ShareGPT.

use crate::common;

use common::mock_server::{tokenize, MockOptions, MockServer};
use common::serve_args;

fn run(server: &MockServer, dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut words = vec!["--base-url", &server.base_url];
    words.extend_from_slice(extra);
    common::serve_result(dir, &words)
}

#[test]
fn random_prompts_have_exact_token_counts_by_the_server_tokenizer() {
    // The mock's detokenizer drops some ids, so the first text of each prompt comes out short
    // and has to be extended.
    let server = MockServer::with_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--num-prompts",
        "12",
        "--input-len",
        "37",
        "--prefix-len",
        "5",
        "--output-len",
        "3",
        "--seed",
        "9",
    ];
    let r = run(&server, dir.path(), &args);

    let bodies = server.take_generation_bodies();
    assert_eq!(bodies.len(), 12);
    for body in &bodies {
        let prompt = body["prompt"]
            .as_str()
            .expect("text prompts when /tokenize exists");
        assert_eq!(tokenize(prompt).len(), 42, "prompt {prompt:?}");
        assert_eq!(body["max_tokens"], 3);
    }
    let prefixes: Vec<Vec<u32>> = bodies
        .iter()
        .map(|b| tokenize(b["prompt"].as_str().unwrap())[..5].to_vec())
        .collect();
    assert!(
        prefixes.iter().all(|p| p == &prefixes[0]),
        "every prompt starts with the shared prefix"
    );
    assert_eq!(r["total_input_tokens"], 12 * 42);
}

#[test]
fn mixed_sends_the_long_prompts_first_and_reports_each_class() {
    // 1 ms of prefill per prompt token: the long prompt's TTFT is over 300 ms, a short one's
    // about 13 ms.
    let server = MockServer::start(MockOptions {
        tokenizer: true,
        prefill_per_token: std::time::Duration::from_millis(1),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--dataset",
        "mixed",
        "--num-prompts",
        "6",
        "--num-long-prompts",
        "2",
        "--input-len",
        "8",
        "--long-input-len",
        "300",
        "--output-len",
        "2",
        "--request-rate",
        "20",
        "--burstiness",
        "inf",
        "--long-lead",
        "0.2",
    ];
    let r = run(&server, dir.path(), &args);

    let lengths: Vec<usize> = server
        .take_generation_bodies()
        .iter()
        .map(|b| tokenize(b["prompt"].as_str().expect("text prompts")).len())
        .collect();
    assert_eq!(
        lengths,
        [300, 300, 8, 8, 8, 8],
        "long ones first, exact lengths"
    );
    assert_eq!(r["input_lens"], serde_json::json!([300, 300, 8, 8, 8, 8]));
    assert_eq!(r["burstiness"], "inf");
    assert_eq!(r["long_prompt_threshold"], 300);
    for key in ["ttft_by_class", "e2el_by_class"] {
        assert_eq!(r[key]["short"]["requests"], 4, "{}", r[key]);
        assert_eq!(r[key]["short"]["completed"], 4);
        assert_eq!(r[key]["long"]["requests"], 2);
        for field in ["median_ms", "p99_ms", "max_ms", "mean_ms"] {
            assert!(
                r[key]["long"][field].as_f64().unwrap() >= 300.0,
                "{key}: {}",
                r[key]
            );
        }
    }
    let short_median = r["ttft_by_class"]["short"]["median_ms"].as_f64().unwrap();
    assert!(
        (8.0..150.0).contains(&short_median),
        "short TTFT {short_median}"
    );
    // The whole run spans the lead and three 50 ms gaps at least.
    assert!(r["duration"].as_f64().unwrap() >= 0.35, "{}", r["duration"]);
}

#[test]
fn mixed_needs_long_prompts_longer_than_the_short_ones() {
    let server = MockServer::with_tokenizer();
    for extra in [
        ["--long-input-len", "8"],
        ["--num-long-prompts", "0"],
        ["--num-long-prompts", "7"],
    ] {
        let mut words = vec![
            "--base-url",
            &server.base_url,
            "--dataset",
            "mixed",
            "--num-prompts",
            "6",
            "--input-len",
            "8",
        ];
        words.extend_from_slice(&extra);
        let error = tokenmill_bench::run_serve(serve_args(&words)).unwrap_err();
        assert!(format!("{error:#}").contains(extra[0]), "{error:#}");
    }
    let lead_without_mixed = serve_args(&["--base-url", &server.base_url, "--long-lead", "1"]);
    let error = tokenmill_bench::run_serve(lead_without_mixed).unwrap_err();
    assert!(format!("{error:#}").contains("--long-lead"), "{error:#}");
}

#[test]
fn range_ratio_spreads_random_lengths() {
    let server = MockServer::with_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--num-prompts",
        "30",
        "--input-len",
        "20",
        "--range-ratio",
        "0.5",
        "--output-len",
        "2",
    ];
    run(&server, dir.path(), &args);
    let lengths: Vec<usize> = server
        .take_generation_bodies()
        .iter()
        .map(|b| tokenize(b["prompt"].as_str().unwrap()).len())
        .collect();
    assert!(lengths.iter().all(|n| (10..=30).contains(n)), "{lengths:?}");
    assert!(lengths.iter().min() != lengths.iter().max(), "{lengths:?}");
}

#[test]
fn without_tokenize_completions_get_token_id_prompts_of_exact_length() {
    let server = MockServer::start(MockOptions {
        tokenizer: false,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let r = run(
        &server,
        dir.path(),
        &[
            "--num-prompts",
            "4",
            "--input-len",
            "25",
            "--output-len",
            "2",
        ],
    );
    for body in server.take_generation_bodies() {
        assert_eq!(body["prompt"].as_array().expect("token ids").len(), 25);
    }
    assert_eq!(r["total_input_tokens"], 100);
}

#[test]
fn sharegpt_sends_first_turns_and_asks_for_the_reference_reply_length() {
    let server = MockServer::with_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sharegpt.json");
    let data = serde_json::json!([
        {"conversations": [{"from": "human", "value": "n=2 one"}, {"from": "gpt", "value": "a b c d"}]},
        {"conversations": [{"from": "human", "value": "lonely"}]},
        {"conversations": [{"from": "human", "value": "n=2 two"}, {"from": "gpt", "value": "a b"}]}
    ]);
    std::fs::write(&path, data.to_string()).unwrap();
    let args = [
        "--dataset",
        "sharegpt",
        "--dataset-path",
        path.to_str().unwrap(),
        "--num-prompts",
        "2",
    ];
    let r = run(&server, dir.path(), &args);
    let mut sent: Vec<(String, u64)> = server
        .take_generation_bodies()
        .iter()
        .map(|b| {
            (
                b["prompt"].as_str().unwrap().to_owned(),
                b["max_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        vec![("n=2 one".to_owned(), 4), ("n=2 two".to_owned(), 2)]
    );
    assert_eq!(r["completed"], 2);
}

#[test]
fn missing_dataset_file_is_a_clear_error() {
    let server = MockServer::with_tokenizer();
    let args = serve_args(&[
        "--base-url",
        &server.base_url,
        "--dataset",
        "jsonl",
        "--dataset-path",
        "/nonexistent.jsonl",
    ]);
    let error = tokenmill_bench::run_serve(args).unwrap_err();
    assert!(
        format!("{error:#}").contains("/nonexistent.jsonl"),
        "{error:#}"
    );
}

#[test]
fn unreachable_server_is_a_clear_error() {
    let args = serve_args(&["--base-url", "http://127.0.0.1:9", "--num-prompts", "1"]);
    let error = tokenmill_bench::run_serve(args).unwrap_err();
    assert!(format!("{error:#}").contains("cannot reach"), "{error:#}");
}
