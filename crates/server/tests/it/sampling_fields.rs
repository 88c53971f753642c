//! The sampling fields beyond the basics, over HTTP against the real default model:
//! `logit_bias`, `prompt_logprobs` and `echo`.

use crate::common;

use std::sync::OnceLock;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};

/// A second server on the fully f32 path, with a token budget so small that every prompt here
/// is prefilled in several chunks.
fn f32_server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        let flags = [
            "--weight-mode",
            "f32",
            "--kv-cache-dtype",
            "f32",
            "--max-num-seqs",
            "4",
            "--max-num-batched-tokens",
            "16",
        ];
        start_server(&flags, ServerOptions::default())
    })
}

async fn post_to(server: &ServerHandle, path: &str, body: Value) -> (StatusCode, Value) {
    let url = format!("{}{path}", server.base_url());
    let response = client().post(url).json(&body).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

async fn prompt_ids(text: &str) -> Vec<u32> {
    let (status, body) = post_json("/tokenize", json!({"prompt": text})).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body["tokens"].clone()).unwrap()
}

fn token_id(name: &Value) -> u32 {
    name.as_str()
        .and_then(|s| s.strip_prefix("token_id:"))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("not a token_id name: {name}"))
}

/// Greedy token ids and their logprobs.
async fn greedy_tokens(server: &ServerHandle, body: Value) -> (Vec<u32>, Vec<f64>) {
    let mut body = body;
    body["temperature"] = json!(0);
    body["logprobs"] = json!(0);
    body["return_tokens_as_token_ids"] = json!(true);
    let (status, reply) = post_to(server, "/v1/completions", body).await;
    assert_eq!(status, 200, "{reply}");
    let logprobs = &reply["choices"][0]["logprobs"];
    let ids = logprobs["tokens"].as_array().unwrap().iter().map(token_id);
    let values = logprobs["token_logprobs"].as_array().unwrap();
    (
        ids.collect(),
        values.iter().map(|v| v.as_f64().unwrap()).collect(),
    )
}

/// The logprob `prompt_logprobs` gives each prompt token from the second on.
async fn prompt_scores(server: &ServerHandle, prompt: &[u32]) -> Vec<f64> {
    let body = json!({"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 0});
    let (status, reply) = post_to(server, "/v1/completions", body).await;
    assert_eq!(status, 200, "{reply}");
    let scores = reply["choices"][0]["prompt_logprobs"].as_array().unwrap();
    assert_eq!(scores.len(), prompt.len(), "{reply}");
    assert!(scores[0].is_null());
    scores[1..]
        .iter()
        .zip(&prompt[1..])
        .map(|(at, id)| at[id.to_string()]["logprob"].as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_logit_bias_of_minus_100_on_the_greedy_token_changes_it() {
    crate::common::skip_without_model!();
    let body = json!({"prompt": "The capital of France is", "max_tokens": 1});
    let (greedy, _) = greedy_tokens(server(), body.clone()).await;
    let mut banned = body.clone();
    banned["logit_bias"] = json!({ greedy[0].to_string(): -100 });
    let (other, _) = greedy_tokens(server(), banned).await;
    assert_ne!(other[0], greedy[0]);
    let mut forced = body;
    forced["logit_bias"] = json!({"42": 100});
    assert_eq!(greedy_tokens(server(), forced).await.0, vec![42]);
}

#[tokio::test]
async fn a_logit_bias_outside_the_vocabulary_or_the_range_is_refused() {
    crate::common::skip_without_model!();
    for bias in [
        json!({"99999999": 1}),
        json!({"12": 101}),
        json!({"a word": 1}),
    ] {
        let body = json!({"prompt": "Hi", "max_tokens": 1, "logit_bias": bias});
        let (status, reply) = post_json("/v1/completions", body).await;
        assert_eq!(status, 400, "{reply}");
        assert_eq!(reply["error"]["param"], "logit_bias", "{reply}");
    }
}

/// Teacher forcing: a generated continuation sent back as part of the prompt is scored as the
/// engine scored each token when it generated it.
async fn prompt_logprobs_equal_generation_logprobs(server: &ServerHandle, tolerance: f64) {
    let prompt = prompt_ids("Once upon a time, in a small village by the sea,").await;
    let body = json!({"prompt": prompt, "max_tokens": 12, "ignore_eos": true});
    let (generated, logprobs) = greedy_tokens(server, body).await;
    let forced: Vec<u32> = prompt.iter().chain(&generated).copied().collect();
    let scores = prompt_scores(server, &forced).await;
    let scored = &scores[prompt.len() - 1..];
    assert_eq!(scored.len(), logprobs.len());
    for (i, (got, want)) in scored.iter().zip(&logprobs).enumerate() {
        assert!(
            (got - want).abs() <= tolerance,
            "token {i}: prompt logprob {got}, generation logprob {want}"
        );
    }
}

/// The quantized kernels give a row the same bits whatever is batched with it (ARCHITECTURE.md),
/// so a prompt row scores exactly as the decode step that generated its token.
#[tokio::test]
async fn prompt_logprobs_equal_generation_logprobs_exactly_on_the_quantized_path() {
    crate::common::skip_without_model!();
    prompt_logprobs_equal_generation_logprobs(server(), 0.0).await;
}

/// `--weight-mode f32` multiplies through a general matrix kernel whose summation order
/// depends on how many rows a step has, so a prefill row and a decode row differ in the last
/// bits (about 1e-6 here).
#[tokio::test]
async fn prompt_logprobs_equal_generation_logprobs_on_the_f32_path_in_chunks() {
    crate::common::skip_without_model!();
    prompt_logprobs_equal_generation_logprobs(f32_server(), 1e-5).await;
}

#[tokio::test]
async fn a_cached_prompt_is_still_scored_whole() {
    crate::common::skip_without_model!();
    let prompt = prompt_ids(&"The quick brown fox jumps over the lazy dog. ".repeat(6)).await;
    assert!(prompt.len() > 40);
    let warm = json!({"prompt": prompt, "max_tokens": 1});
    let (status, _) = post_json("/v1/completions", warm).await;
    assert_eq!(status, 200);
    let first = prompt_scores(server(), &prompt).await;
    let again = prompt_scores(server(), &prompt).await;
    assert_eq!(first, again);
}

#[tokio::test]
async fn echo_with_logprobs_scores_the_prompt_as_prompt_logprobs_does() {
    crate::common::skip_without_model!();
    let prompt = "The sky is blue and the grass is";
    let body = json!({"prompt": prompt, "max_tokens": 2, "temperature": 0, "echo": true,
                      "logprobs": 1, "prompt_logprobs": 1});
    let (status, reply) = post_json("/v1/completions", body).await;
    assert_eq!(status, 200, "{reply}");
    let choice = &reply["choices"][0];
    assert!(
        choice["text"].as_str().unwrap().starts_with(prompt),
        "{reply}"
    );
    let ids = prompt_ids(prompt).await;
    let logprobs = choice["logprobs"]["token_logprobs"].as_array().unwrap();
    assert_eq!(logprobs.len(), ids.len() + 2, "{reply}");
    assert!(logprobs[0].is_null());
    assert!(choice["logprobs"]["top_logprobs"][0].is_null());
    let scores = choice["prompt_logprobs"].as_array().unwrap();
    for (i, id) in ids.iter().enumerate().skip(1) {
        assert_eq!(
            logprobs[i],
            scores[i][id.to_string()]["logprob"],
            "token {i}"
        );
    }
}

#[tokio::test]
async fn prompt_logprobs_are_refused_with_stream() {
    crate::common::skip_without_model!();
    let body = json!({"prompt": "Hi", "max_tokens": 1, "stream": true, "prompt_logprobs": 1});
    let (status, reply) = post_json("/v1/completions", body).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["param"], "prompt_logprobs");
}

#[tokio::test]
async fn a_streamed_echo_opens_with_the_prompt_and_scores_it_as_the_whole_reply_does() {
    crate::common::skip_without_model!();
    let prompt = "The sky is blue and the grass is";
    let body = json!({"prompt": prompt, "max_tokens": 4, "temperature": 0, "echo": true,
                      "logprobs": 1, "n": 2});
    let (status, whole) = post_json("/v1/completions", body.clone()).await;
    assert_eq!(status, 200, "{whole}");
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let chunks = post_stream("/v1/completions", streamed).await;
    for index in 0..2 {
        let choice = &whole["choices"][index];
        assert!(choice["text"].as_str().unwrap().starts_with(prompt));
        assert_eq!(
            streamed_text(&chunks, index),
            choice["text"],
            "choice {index}"
        );
        // Each list of `logprobs`, chunk after chunk, adds up to the whole reply's.
        for list in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
            let joined: Vec<Value> = chunks
                .iter()
                .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
                .filter(|c| c["index"] == index)
                .flat_map(|c| c["logprobs"][list].as_array().cloned().unwrap_or_default())
                .collect();
            assert_eq!(
                Value::Array(joined),
                choice["logprobs"][list],
                "{list} of {index}"
            );
        }
    }
}
