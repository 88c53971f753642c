//! `bench serve` against a mock that speculates: the run's drafts come from the growth of the
//! server's counters (warm-ups left out) or, without them, from the replies' own timings; and
//! `--save-responses` keeps every prompt with its reply.

use crate::common;

use common::mock_server::{MockOptions, MockServer, SPEC_PER_REPLY};

/// A grounded run of 6 chat prompts after 2 warm-ups, saving result and responses in `dir`.
fn run(server: &MockServer, dir: &std::path::Path) -> serde_json::Value {
    let responses = dir.join("responses.jsonl");
    let words = [
        "--base-url",
        &server.base_url,
        "--endpoint",
        "chat",
        "--dataset",
        "grounded",
        "--num-prompts",
        "6",
        "--num-warmups",
        "2",
        "--output-len",
        "4",
        "--no-progress-bar",
        "--save-responses",
        responses.to_str().unwrap(),
    ];
    common::serve_result(dir, &words)
}

#[test]
fn the_run_reports_what_the_spec_decode_counters_grew_by_during_it() {
    let server = MockServer::start(MockOptions {
        tokenizer: true,
        spec_metrics: true,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let spec = run(&server, dir.path())["spec_decode"].clone();
    let (drafts, tokens, accepted, per_pos) = SPEC_PER_REPLY;
    assert_eq!(spec["source"], "metrics");
    assert_eq!(spec["num_drafts"], 6 * drafts, "{spec}");
    assert_eq!(spec["num_draft_tokens"], 6 * tokens);
    assert_eq!(spec["num_accepted_tokens"], 6 * accepted);
    assert_eq!(
        spec["accepted_per_pos"],
        serde_json::json!([6 * per_pos[0], 6 * per_pos[1]])
    );
    assert_eq!(
        spec["acceptance_rate"].as_f64(),
        Some(accepted as f64 / tokens as f64)
    );
    assert_eq!(
        spec["mean_acceptance_length"].as_f64(),
        Some(1.0 + accepted as f64 / drafts as f64)
    );
}

#[test]
fn without_counters_the_replies_timings_give_the_drafted_and_accepted_tokens() {
    let server = MockServer::start(MockOptions {
        tokenizer: true,
        spec_timings: true,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let spec = run(&server, dir.path())["spec_decode"].clone();
    let (_, tokens, accepted, _) = SPEC_PER_REPLY;
    assert_eq!(spec["source"], "reply_timings");
    assert!(spec["num_drafts"].is_null());
    assert_eq!(spec["num_draft_tokens"], 6 * tokens);
    assert_eq!(spec["num_accepted_tokens"], 6 * accepted);
    assert!(spec["mean_acceptance_length"].is_null());
}

#[test]
fn a_server_without_speculation_gets_no_spec_decode_and_its_replies_are_saved_in_order() {
    let server = MockServer::with_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let result = run(&server, dir.path());
    assert!(result.get("spec_decode").is_none(), "{result}");

    let sent: Vec<String> = server
        .take_generation_bodies()
        .iter()
        .skip(2)
        .map(|body| body["messages"][0]["content"].as_str().unwrap().to_owned())
        .collect();
    let saved: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("responses.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(saved.len(), 6);
    let mut saved_prompts: Vec<&str> = saved
        .iter()
        .map(|s| s["prompt"].as_str().unwrap())
        .collect();
    let mut sent_prompts: Vec<&str> = sent.iter().map(String::as_str).collect();
    // All six leave at once, so the mock saw them in any order; the file keeps the dataset's.
    saved_prompts.sort_unstable();
    sent_prompts.sort_unstable();
    assert_eq!(saved_prompts, sent_prompts);
    for (index, line) in saved.iter().enumerate() {
        assert_eq!(line["index"], index);
        assert_eq!(line["text"], "tok tok tok tok ");
        assert_eq!(line["output_tokens"], 4);
        assert!(line["error"].is_null());
    }
}
