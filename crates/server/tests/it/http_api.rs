//! The HTTP API against the real default model: replies equal offline generation, streams
//! concatenate to the same text, and the sampling options do what they promise.

use crate::common;

use common::*;
use serde_json::{json, Value};
use tokenmill_engine::SamplingParams;

const MAX_TOKENS: usize = 24;

fn usage(body: &Value) -> (u64, u64, u64) {
    let u = &body["usage"];
    (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
        u["total_tokens"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn a_greedy_completion_equals_offline_generation_and_counts_its_tokens() {
    crate::common::skip_without_model!();
    let prompt = "The capital of France is";
    let expected = reference().completion(prompt, greedy(MAX_TOKENS));
    let (status, body) = post_json(
        "/v1/completions",
        json!({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], expected.text);
    assert_eq!(body["choices"][0]["finish_reason"], expected.finish_reason);
    let n = expected.token_ids.len() as u64;
    let p = expected.prompt_tokens as u64;
    assert_eq!(usage(&body), (p, n, p + n));
}

#[tokio::test]
async fn a_streamed_completion_concatenates_to_the_offline_text_and_ends_with_usage() {
    crate::common::skip_without_model!();
    let prompt = "Here is a short poem about the sea:";
    let expected = reference().completion(prompt, greedy(MAX_TOKENS));
    let chunks = post_stream(
        "/v1/completions",
        json!({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0,
               "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(streamed_text(&chunks, 0), expected.text);
    assert_eq!(
        streamed_finish_reason(&chunks, 0).as_deref(),
        Some(expected.finish_reason)
    );
    // Every chunk before the usage one carries text or the end: none is sent before a token exists.
    let (last, content) = chunks.split_last().unwrap();
    for chunk in content {
        let choice = &chunk["choices"][0];
        assert!(
            !choice["text"].as_str().unwrap().is_empty() || choice["finish_reason"].is_string(),
            "{chunk}"
        );
    }
    assert_eq!(last["choices"], json!([]));
    let n = expected.token_ids.len() as u64;
    let p = expected.prompt_tokens as u64;
    assert_eq!(usage(last), (p, n, p + n));
}

#[tokio::test]
async fn a_greedy_chat_reply_equals_offline_generation_over_the_chat_template() {
    crate::common::skip_without_model!();
    let user = "What is the tallest mountain on Earth?";
    let expected = reference().chat(user, greedy(MAX_TOKENS));
    let (status, body) = post_json(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": user}],
               "max_completion_tokens": MAX_TOKENS, "temperature": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], expected.text);
    let n = expected.token_ids.len() as u64;
    let p = expected.prompt_tokens as u64;
    assert_eq!(usage(&body), (p, n, p + n));
}

#[tokio::test]
async fn a_streamed_chat_sends_the_role_with_its_first_content_and_matches_offline() {
    crate::common::skip_without_model!();
    let user = "Name three colours.";
    let expected = reference().chat(user, greedy(MAX_TOKENS));
    let chunks = post_stream(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": [{"type": "text", "text": user}]}],
               "max_tokens": MAX_TOKENS, "temperature": 0, "stream": true,
               "stream_options": {"include_usage": true}}),
    )
    .await;
    let first = &chunks[0]["choices"][0]["delta"];
    assert_eq!(first["role"], "assistant");
    assert!(!first["content"].as_str().unwrap().is_empty(), "{first}");
    assert!(chunks[1..]
        .iter()
        .all(|c| c["choices"][0]["delta"].get("role").is_none()));
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(streamed_text(&chunks, 0), expected.text);
    let n = expected.token_ids.len() as u64;
    assert_eq!(usage(chunks.last().unwrap()).1, n);
}

/// A stop string made of the end of one token and the start of the next, first seen there.
fn stop_across_tokens(expected: &Expected) -> (String, usize) {
    let tokenizer = &reference().tokenizer;
    for k in 3..expected.token_ids.len() - 1 {
        let before = tokenizer.decode(&expected.token_ids[..k], true).unwrap();
        let at = before.len();
        if at < 2 || !expected.text.starts_with(&before) || !expected.text.is_char_boundary(at + 2)
        {
            continue;
        }
        let stop = &expected.text[at - 2..at + 2];
        if stop.is_ascii() && expected.text.find(stop) == Some(at - 2) {
            return (stop.to_owned(), at - 2);
        }
    }
    panic!("no stop string spans two tokens of {:?}", expected.text);
}

#[tokio::test]
async fn a_stop_string_spanning_tokens_ends_the_text_before_it_streamed_or_not() {
    crate::common::skip_without_model!();
    let prompt = "Once upon a time, in a small village,";
    let expected = reference().completion(prompt, greedy(MAX_TOKENS));
    let (stop, at) = stop_across_tokens(&expected);
    let body = json!({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
                      "stop": [stop, "never-appears-xyz"]});
    let (status, reply) = post_json("/v1/completions", body.clone()).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["text"], expected.text[..at]);
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert!(
        reply["usage"]["completion_tokens"].as_u64().unwrap() < expected.token_ids.len() as u64
    );

    let mut streaming = body;
    streaming["stream"] = json!(true);
    let chunks = post_stream("/v1/completions", streaming).await;
    assert_eq!(streamed_text(&chunks, 0), expected.text[..at]);
    assert_eq!(streamed_finish_reason(&chunks, 0).as_deref(), Some("stop"));
}

fn seeded(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        seed: Some(seed),
        max_tokens: 16,
        ..SamplingParams::default()
    }
}

#[tokio::test]
async fn n_choices_sample_with_consecutive_seeds_and_reproduce_offline() {
    crate::common::skip_without_model!();
    let prompt = "My favourite food is";
    let (status, body) = post_json(
        "/v1/completions",
        json!({"prompt": prompt, "n": 2, "seed": 11, "temperature": 0.8, "max_tokens": 16}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    for (i, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], i);
        let expected = reference().completion(prompt, seeded(11 + i as u64));
        assert_eq!(choice["text"], expected.text, "choice {i}");
    }
    let completion_tokens: u64 = (0..2)
        .map(|i| {
            reference()
                .completion(prompt, seeded(11 + i))
                .token_ids
                .len() as u64
        })
        .sum();
    assert_eq!(body["usage"]["completion_tokens"], completion_tokens);
}

#[tokio::test]
async fn the_same_seed_at_temperature_0_8_gives_the_same_text_twice() {
    crate::common::skip_without_model!();
    let body = json!({"messages": [{"role": "user", "content": "Tell me a fact about cats."}],
                      "seed": 1234, "temperature": 0.8, "max_tokens": 16});
    let (_, first) = post_json("/v1/chat/completions", body.clone()).await;
    let (_, second) = post_json("/v1/chat/completions", body).await;
    let text = first["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!text.is_empty());
    assert_eq!(text, second["choices"][0]["message"]["content"]);
}

#[tokio::test]
async fn completion_logprobs_describe_every_generated_token() {
    crate::common::skip_without_model!();
    let (status, body) = post_json(
        "/v1/completions",
        json!({"prompt": "One, two, three,", "max_tokens": 8, "temperature": 0, "logprobs": 3}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let logprobs = &body["choices"][0]["logprobs"];
    let n = body["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert_eq!(logprobs["tokens"].as_array().unwrap().len(), n);
    assert_eq!(logprobs["text_offset"].as_array().unwrap().len(), n);
    for (chosen, top) in logprobs["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(logprobs["top_logprobs"].as_array().unwrap())
    {
        let chosen = chosen.as_f64().unwrap();
        let top = top.as_object().unwrap();
        assert!(
            chosen <= 0.0 && !top.is_empty() && top.len() <= 3,
            "{chosen} {top:?}"
        );
        // Greedy picks the most likely token, so no alternative beats it.
        let best = top
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!(chosen >= best - 1e-4, "{chosen} < {best}");
    }
}

#[tokio::test]
async fn chat_logprobs_list_top_alternatives_per_token() {
    crate::common::skip_without_model!();
    let chunks = post_stream(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6,
               "temperature": 0, "logprobs": true, "top_logprobs": 2, "stream": true,
               "stream_options": {"include_usage": true}}),
    )
    .await;
    let entries: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    let n = chunks.last().unwrap()["usage"]["completion_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(entries.len() as u64, n);
    for entry in &entries {
        assert_eq!(
            entry["top_logprobs"].as_array().unwrap().len(),
            2,
            "{entry}"
        );
        assert!(entry["logprob"].as_f64().unwrap() <= 0.0);
        assert!(entry["token"].is_string() && entry["bytes"].is_array());
    }
}

#[tokio::test]
async fn several_prompts_and_token_id_prompts_each_get_their_own_choice() {
    crate::common::skip_without_model!();
    let expected = reference().completion("Hello", greedy(8));
    let ids = reference().tokenizer.encode("Hello", true).unwrap();
    let (status, body) = post_json(
        "/v1/completions",
        json!({"prompt": [ids.clone(), ids], "max_tokens": 8, "temperature": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for i in 0..2 {
        assert_eq!(body["choices"][i]["text"], expected.text);
        assert_eq!(body["choices"][i]["index"], i);
    }
    assert_eq!(
        body["usage"]["prompt_tokens"],
        2 * expected.prompt_tokens as u64
    );
}

#[tokio::test]
async fn tokenize_and_detokenize_use_the_model_tokenizer() {
    crate::common::skip_without_model!();
    let text = "Hello world, how are you?";
    let ids = reference().tokenizer.encode(text, true).unwrap();
    let (status, body) = post_json("/tokenize", json!({"prompt": text})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tokens"], json!(ids));
    assert_eq!(body["count"], ids.len());
    assert!(body["max_model_len"].as_u64().unwrap() > 0);

    let (_, chat) = post_json(
        "/tokenize",
        json!({"messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(chat["tokens"], json!(reference().chat_prompt_ids("Hi")));

    let (status, back) = post_json("/detokenize", json!({"tokens": ids})).await;
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["prompt"], text);
}

#[tokio::test]
async fn models_health_and_version_describe_the_server() {
    crate::common::skip_without_model!();
    let (status, models) = get_text("/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    let entry = &models["data"][0];
    assert_eq!(entry["id"], "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(entry["root"], "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(entry["object"], "model");
    assert_eq!(get_text("/health").await.0, 200);
    let (status, version) = get_text("/version").await;
    assert_eq!(status, 200);
    assert!(version.contains(env!("CARGO_PKG_VERSION")));
}

#[tokio::test]
async fn metrics_count_tokens_and_finished_requests() {
    crate::common::skip_without_model!();
    let label = "model_name=\"SmolLM2-135M-Instruct.Q4_1\"";
    let before = get_text("/metrics").await.1;
    let (_, body) = post_json(
        "/v1/completions",
        json!({"prompt": "Counting: 1, 2, 3,", "max_tokens": 5, "ignore_eos": true, "temperature": 0}),
    )
    .await;
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    let after = get_text("/metrics").await.1;
    let length = format!("tokenmill:request_success_total{{{label},finished_reason=\"length\"}}");
    assert!(metric(&after, &length) >= metric(&before, &length) + 1.0);
    let generated = "tokenmill:generation_tokens_total";
    assert!(metric(&after, generated) >= metric(&before, generated) + 5.0);
    let ttft = "tokenmill:time_to_first_token_seconds_count";
    assert!(metric(&after, ttft) >= metric(&before, ttft) + 1.0);
    for name in [
        "tokenmill:num_requests_running",
        "tokenmill:num_requests_waiting",
        "tokenmill:kv_cache_usage_perc",
        "tokenmill:prefix_cache_queries_total",
        "tokenmill:prefix_cache_hits_total",
        "tokenmill:num_preemptions_total",
        "tokenmill:prompt_tokens_total",
        "tokenmill:inter_token_latency_seconds_count",
        "tokenmill:request_time_per_output_token_seconds_count",
        "tokenmill:e2e_request_latency_seconds_count",
        "tokenmill:request_queue_time_seconds_count",
        "tokenmill:request_prefill_time_seconds_count",
        "tokenmill:request_decode_time_seconds_count",
    ] {
        metric(&after, name);
    }
    assert!(after.contains(label));
}

#[tokio::test]
async fn a_server_with_an_itl_target_reports_its_steps_in_metrics() {
    crate::common::skip_without_model!();
    use tokenmill_server::http::api_server::ServerOptions;
    let server = tokio::task::spawn_blocking(|| {
        start_server(&["--target-itl-ms", "1000"], ServerOptions::default())
    })
    .await
    .unwrap();
    let base = server.base_url();
    let body = json!({"prompt": "Counting: 1, 2, 3,", "max_tokens": 24, "ignore_eos": true, "temperature": 0});
    let (_, reply) = post_json_to(&base, "/v1/completions", body).await;
    assert_eq!(reply["usage"]["completion_tokens"], 24);
    let prompt_tokens = reply["usage"]["prompt_tokens"].as_f64().unwrap();
    // The engine publishes its stats after the step that sent the last token returns, so
    // the reply can arrive a moment before its last step is counted: wait for it briefly.
    let mut text = String::new();
    for _ in 0..100 {
        text = metrics_text(&base).await;
        if metric(&text, "tokenmill:step_time_seconds_count") >= 24.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // At least one step per generated token; how many more depends on how the ITL target
    // rations the prompt on this machine at this moment.
    let steps = metric(&text, "tokenmill:step_time_seconds_count");
    assert!(
        (24.0..=24.0 + prompt_tokens).contains(&steps),
        "{steps} steps"
    );
    assert_eq!(
        metric(&text, "tokenmill:step_prefill_tokens_total"),
        prompt_tokens
    );
    // 24 steps are enough for the cost model to predict the last few.
    let error = metric(&text, "tokenmill:step_time_prediction_error_ratio");
    assert!(error.is_finite() && error >= 0.0, "{error}");
}

#[tokio::test]
async fn prompt_tokens_details_report_the_prompt_tokens_the_prefix_cache_served() {
    crate::common::skip_without_model!();
    use tokenmill_server::http::api_server::ServerOptions;
    let server = tokio::task::spawn_blocking(|| {
        start_server(
            &[],
            ServerOptions {
                prompt_tokens_details: true,
                ..ServerOptions::default()
            },
        )
    })
    .await
    .unwrap();
    let base = server.base_url();
    let post = |body: Value| {
        let base = base.clone();
        async move { post_json_to(&base, "/v1/completions", body).await.1 }
    };
    // Long enough for several full 16-token blocks; a first prompt no one has sent before.
    let prompt = "Prompt tokens details: ".to_owned() + &"a cached block of words, ".repeat(12);
    let first = post(json!({"prompt": prompt, "max_tokens": 4, "temperature": 0})).await;
    assert_eq!(
        first["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{first}"
    );
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();
    // The same prompt again: every full block but the one holding the last token is cached.
    let cached = (prompt_tokens - 1) / 16 * 16;
    assert!(cached >= 64, "{prompt_tokens} prompt tokens");
    let again = post(json!({"prompt": prompt, "max_tokens": 4, "temperature": 0})).await;
    assert_eq!(
        again["usage"]["prompt_tokens_details"]["cached_tokens"], cached,
        "{again}"
    );
    // Two choices of one prompt count its cached tokens once, as `prompt_tokens` counts it.
    let two = post(json!({"prompt": prompt, "max_tokens": 4, "n": 2, "temperature": 0})).await;
    assert_eq!(two["usage"]["prompt_tokens"], prompt_tokens);
    assert_eq!(
        two["usage"]["prompt_tokens_details"]["cached_tokens"], cached,
        "{two}"
    );
    // A stream that a stop string ends still reports it in its usage chunk.
    let chunks = post_stream_to(
        &server,
        "/v1/completions",
        json!({"prompt": prompt, "max_tokens": 8, "temperature": 0, "stop": [" "],
               "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"], cached,
        "{usage}"
    );
    // Without the flag there are no details, as vLLM leaves them out.
    let (_, plain) = post_json(
        "/v1/completions",
        json!({"prompt": prompt, "max_tokens": 4, "temperature": 0}),
    )
    .await;
    assert!(
        plain["usage"].get("prompt_tokens_details").is_none(),
        "{plain}"
    );
}
