//! What SGLang's and vLLM's routers need from a replica, over HTTP against the real default
//! model: the fields they add when they re-serialise a request (accepted, and honoured where
//! they mean something), SGLang's info and load endpoints, and the drain that a SIGTERM
//! starts (`/health` 503 at once, new requests 503, in-flight ones finish, then exit).

use crate::common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};
use tokenmill_server::text::chat_template::ChatMessage;
use tokenmill_server::tools::reasoning_parser::ReasoningParserKind;

/// The fields sglang-router 0.3.2 adds to every completions request (captured by pointing it
/// at a listener that logs request bodies); vllm-router 0.1.17 adds the same ones.
fn router_completion_fields() -> Value {
    json!({"stream": false, "echo": false, "no_stop_trim": false, "ignore_eos": false,
           "skip_special_tokens": true, "return_hidden_states": false})
}

/// What both routers add to chat requests (vllm-router adds `include_reasoning`; SGLang's
/// turns `max_tokens` into `max_completion_tokens`).
fn router_chat_fields() -> Value {
    json!({"logprobs": false, "stream": false, "no_stop_trim": false, "ignore_eos": false,
           "continue_final_message": false, "skip_special_tokens": true,
           "separate_reasoning": true, "stream_reasoning": true,
           "return_hidden_states": false, "include_reasoning": true})
}

fn with(mut body: Value, extra: Value) -> Value {
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn the_fields_routers_add_are_accepted_and_change_nothing() {
    crate::common::skip_without_model!();
    let prompt = "The capital of France is";
    let expected = reference().completion(prompt, greedy(8)).text;
    let body = with(
        router_completion_fields(),
        json!({"prompt": prompt, "max_tokens": 8, "temperature": 0}),
    );
    let (status, reply) = post_json("/v1/completions", body.clone()).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["text"], expected);
    let chunks = post_stream("/v1/completions", with(body, json!({"stream": true}))).await;
    assert_eq!(streamed_text(&chunks, 0), expected);

    let expected = reference().chat("Name a fruit.", greedy(8)).text;
    let body = with(
        router_chat_fields(),
        json!({"messages": [{"role": "user", "content": "Name a fruit."}],
               "max_completion_tokens": 8, "temperature": 0}),
    );
    let (status, reply) = post_json("/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["message"]["content"], expected);
    let chunks = post_stream("/v1/chat/completions", with(body, json!({"stream": true}))).await;
    assert_eq!(streamed_text(&chunks, 0), expected);
}

#[tokio::test]
async fn chat_echo_starts_the_reply_with_the_last_message_when_it_has_the_reply_role() {
    crate::common::skip_without_model!();
    let continued = json!({"messages": [
        {"role": "user", "content": "Name a fruit."},
        {"role": "assistant", "content": "A fruit I like is"}],
        "max_tokens": 8, "temperature": 0});
    let after_user = json!({"messages": [{"role": "user", "content": "Name a fruit."}],
                            "max_tokens": 8, "temperature": 0});
    for (body, echoed) in [
        (
            with(continued.clone(), json!({"continue_final_message": true})),
            "A fruit I like is",
        ),
        (continued, "A fruit I like is"),
        // Under a generation prompt the reply is the assistant's and the last message the
        // user's: nothing is echoed.
        (after_user, ""),
    ] {
        let (status, plain) = post_json("/v1/chat/completions", body.clone()).await;
        assert_eq!(status, 200, "{plain}");
        let plain = plain["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(!plain.is_empty());
        let echo = with(body, json!({"echo": true}));
        let (status, reply) = post_json("/v1/chat/completions", echo.clone()).await;
        assert_eq!(status, 200, "{reply}");
        let expected = format!("{echoed}{plain}");
        assert_eq!(reply["choices"][0]["message"]["content"], expected);
        let chunks = post_stream("/v1/chat/completions", with(echo, json!({"stream": true}))).await;
        assert_eq!(streamed_text(&chunks, 0), expected);
    }
}

#[tokio::test]
async fn values_that_ask_for_what_is_not_done_are_refused_by_name() {
    crate::common::skip_without_model!();
    for (path, body, param) in [
        (
            "/v1/completions",
            json!({"prompt": "a", "return_hidden_states": true}),
            "return_hidden_states",
        ),
        (
            "/v1/chat/completions",
            chat_body(json!({"return_hidden_states": true})),
            "return_hidden_states",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "continue_final_message": true}),
            "continue_final_message",
        ),
    ] {
        let (status, reply) = post_json(path, body).await;
        assert_eq!(status, 400, "{reply}");
        assert_eq!(reply["error"]["param"], param, "{reply}");
        assert_eq!(reply["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn no_stop_trim_keeps_the_stop_string_as_include_stop_str_in_output_does() {
    crate::common::skip_without_model!();
    let prompt = "The capital of France is";
    let expected = reference().completion(prompt, greedy(24)).text;
    let at = expected[expected.len() / 3..]
        .find(' ')
        .map(|i| i + expected.len() / 3)
        .expect("a space in the completion");
    let stop: String = expected[at..].chars().take(4).collect();
    let at = expected.find(&stop).unwrap();
    for (no_stop_trim, end) in [(true, at + stop.len()), (false, at)] {
        let body = json!({"prompt": prompt, "max_tokens": 24, "temperature": 0,
                          "stop": stop, "no_stop_trim": no_stop_trim});
        let (status, reply) = post_json("/v1/completions", body).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["choices"][0]["text"], expected[..end]);
    }
}

#[tokio::test]
async fn continue_final_message_continues_the_assistant_turn_without_a_generation_prompt() {
    crate::common::skip_without_model!();
    let turns = [
        ChatMessage::new("user", "List three colours."),
        ChatMessage::new("assistant", "1. Red\n2."),
    ];
    let reference = reference();
    let rendered = reference
        .template_render(&turns, false)
        .expect("the conversation renders");
    let cut = rendered.rfind("2.").unwrap() + 2;
    let prompt = reference.tokenizer.encode(&rendered[..cut], false).unwrap();
    let expected = reference.run_ids(prompt.clone(), greedy(6));
    let messages = json!([{"role": "user", "content": "List three colours."},
                          {"role": "assistant", "content": "1. Red\n2."}]);
    // SGLang's router sends the flag alone; vLLM's clients add `add_generation_prompt: false`.
    for extra in [json!({}), json!({"add_generation_prompt": false})] {
        let body = with(
            json!({"messages": messages, "max_tokens": 6, "temperature": 0,
                   "continue_final_message": true}),
            extra,
        );
        let (status, reply) = post_json("/v1/chat/completions", body).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["usage"]["prompt_tokens"], prompt.len());
        assert_eq!(reply["choices"][0]["message"]["content"], expected.text);
    }
    for (body, why) in [
        (
            json!({"messages": messages, "continue_final_message": true,
                   "add_generation_prompt": true}),
            "cannot both be true",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}],
                   "continue_final_message": true}),
            "assistant message",
        ),
    ] {
        let (status, reply) = post_json("/v1/chat/completions", body).await;
        assert_eq!(status, 400, "{reply}");
        assert_eq!(reply["error"]["param"], "continue_final_message");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{message}");
    }
}

fn reasoning_server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        start_server(
            &[],
            ServerOptions {
                reasoning_parser: Some(ReasoningParserKind::Qwen3),
                ..ServerOptions::default()
            },
        )
    })
}

/// A reply that reasons: SmolLM2 never writes `<think>` by itself, so a regex holds it to
/// `<think>…</think>` then an answer (greedy, so every request gets the same text).
fn thinking_body(extra: Value) -> Value {
    with(
        json!({"messages": [{"role": "user", "content": "Name a fruit."}],
               "max_tokens": 40, "temperature": 0,
               "structured_outputs": {"regex": "<think>[a-z ]{3,24}</think>[A-Za-z ]{3,24}"}}),
        extra,
    )
}

async fn post_reasoning(body: Value) -> Value {
    let url = format!("{}/v1/chat/completions", reasoning_server().base_url());
    let response = client().post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn stream_reasoning(body: Value) -> Vec<Value> {
    let url = format!("{}/v1/chat/completions", reasoning_server().base_url());
    let response = client()
        .post(url)
        .json(&with(body, json!({"stream": true})))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    read_stream(response).await
}

fn reasoning_chunks(chunks: &[Value]) -> Vec<String> {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_reasoning_fields_choose_where_the_reasoning_goes() {
    crate::common::skip_without_model!();
    let split = post_reasoning(thinking_body(json!({}))).await;
    let message = &split["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap().to_owned();
    let content = message["content"].as_str().unwrap().to_owned();
    assert!(!reasoning.is_empty() && !content.is_empty(), "{split}");
    assert!(!content.contains("think>"), "{split}");

    // `separate_reasoning: false`: no split, the think block stays in the content.
    let whole = post_reasoning(thinking_body(json!({"separate_reasoning": false}))).await;
    let message = &whole["choices"][0]["message"];
    assert_eq!(
        message["content"],
        format!("<think>{reasoning}</think>{content}")
    );
    assert!(message.get("reasoning_content").is_none(), "{whole}");

    // `include_reasoning: false`: the reasoning is dropped, in a reply and in a stream.
    let dropped = post_reasoning(thinking_body(json!({"include_reasoning": false}))).await;
    let message = &dropped["choices"][0]["message"];
    assert_eq!(message["content"], content);
    assert!(message.get("reasoning_content").is_none(), "{dropped}");
    let chunks = stream_reasoning(thinking_body(json!({"include_reasoning": false}))).await;
    assert!(reasoning_chunks(&chunks).is_empty());
    assert_eq!(streamed_text(&chunks, 0), content);

    // Streamed as generated by default; in one chunk under `stream_reasoning: false`.
    let streamed = reasoning_chunks(&stream_reasoning(thinking_body(json!({}))).await);
    assert!(streamed.len() > 1, "{streamed:?}");
    assert_eq!(streamed.concat(), reasoning);
    let chunks = stream_reasoning(thinking_body(json!({"stream_reasoning": false}))).await;
    assert_eq!(reasoning_chunks(&chunks), vec![reasoning]);
    assert_eq!(streamed_text(&chunks, 0), content);
}

#[tokio::test]
async fn sglang_info_endpoints_answer_in_both_spellings_with_the_served_name() {
    crate::common::skip_without_model!();
    for path in ["/server_info", "/get_server_info"] {
        let (status, text) = get_text(path).await;
        assert_eq!(status, 200, "{path}");
        let info: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(info["served_model_name"], "SmolLM2-135M-Instruct.Q4_1");
        assert!(info["model_path"].as_str().unwrap().ends_with(".gguf"));
        assert_eq!(info["page_size"], 16);
        assert_eq!(info["max_total_num_tokens"], 512 * 16);
        assert_eq!(info["dp_size"], 1);
    }
    for path in ["/model_info", "/get_model_info"] {
        let (status, text) = get_text(path).await;
        assert_eq!(status, 200, "{path}");
        let info: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(info["is_generation"], true);
        assert!(info["model_path"].as_str().unwrap().ends_with(".gguf"));
    }
    let (status, text) = get_text("/get_load").await;
    assert_eq!(status, 200);
    let load: Value = serde_json::from_str(&text).unwrap();
    let ranks = load.as_array().expect("one entry per data-parallel rank");
    assert_eq!(ranks.len(), 1);
    for key in ["dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"] {
        assert!(ranks[0][key].is_u64(), "{key}: {load}");
    }
}

#[tokio::test]
async fn a_drain_fails_health_and_new_requests_at_once_and_lets_streams_finish() {
    crate::common::skip_without_model!();
    let mut server = start_server(&[], ServerOptions::default());
    let base = server.base_url();
    let body = json!({"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": true,
                      "temperature": 0, "stream": true});
    let mut stream = client()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut reader = SseReader::default();
    let mut payloads = first_payloads(&mut stream, &mut reader, 1).await;
    server.begin_shutdown();
    // The drain starts as soon as the signal is seen; poll briefly for it.
    let started = Instant::now();
    let health = loop {
        let health = client().get(format!("{base}/health")).send().await.unwrap();
        if health.status() != 200 || started.elapsed() > Duration::from_secs(2) {
            break health;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(health.status(), 503);
    let refused = client()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "a", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "shutting_down", "{error}");
    while let Some(bytes) = stream.chunk().await.unwrap() {
        payloads.extend(reader.feed(&bytes));
    }
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(
        streamed_finish_reason(&chunks, 0).as_deref(),
        Some("length")
    );
    let stopping = Instant::now();
    while !server.has_stopped() {
        assert!(
            stopping.elapsed() < Duration::from_secs(5),
            "the server is still up with nothing in flight"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn metrics_compat_vllm_exports_what_endpoint_pickers_read_under_vllm_names() {
    crate::common::skip_without_model!();
    let (_, native) = get_text("/metrics").await;
    assert!(
        !native.contains("vllm:"),
        "vLLM names without --metrics-compat"
    );
    assert!(native.contains("tokenmill:cache_config_info{block_size=\"16\","));
    assert!(
        native.contains("tokenmill:cpu_kernel_info{kernel=\""),
        "{native}"
    );
    let server = start_server(
        &[],
        ServerOptions {
            metrics_compat: Some(tokenmill_server::metrics::MetricsCompat::Vllm),
            ..ServerOptions::default()
        },
    );
    let base = server.base_url();
    let body = json!({"prompt": "The capital of France is", "max_tokens": 4});
    let reply = client()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    // The gauges are the engine's last published step: the reply can reach the client a
    // moment before the step that retired its request is published.
    let started = Instant::now();
    let text = loop {
        let text = metrics_text(&base).await;
        if metric(&text, "tokenmill:num_requests_running") == 0.0
            || started.elapsed().as_secs() >= 10
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for gauge in [
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    ] {
        assert_eq!(metric(&text, gauge), 0.0, "{gauge} with nothing in flight");
    }
    for (vllm, native) in [
        ("vllm:prompt_tokens_total", "tokenmill:prompt_tokens_total"),
        (
            "vllm:generation_tokens_total",
            "tokenmill:generation_tokens_total",
        ),
        (
            "vllm:prefix_cache_queries_total",
            "tokenmill:prefix_cache_queries_total",
        ),
        (
            "vllm:e2e_request_latency_seconds_count",
            "tokenmill:e2e_request_latency_seconds_count",
        ),
    ] {
        assert_eq!(metric(&text, vllm), metric(&text, native), "{vllm}");
    }
    assert!(metric(&text, "vllm:prompt_tokens_total") > 0.0);
    let cache = text
        .lines()
        .find(|l| l.starts_with("vllm:cache_config_info{"))
        .expect("vllm:cache_config_info");
    assert!(cache.contains("block_size=\"16\""), "{cache}");
    assert!(cache.contains("num_gpu_blocks=\"512\""), "{cache}");
    assert!(text
        .lines()
        .any(|l| l.starts_with("vllm:lora_requests_info{max_lora=\"0\"")));
}

#[tokio::test]
async fn a_drain_that_runs_out_ends_the_streams_still_generating_with_abort() {
    crate::common::skip_without_model!();
    let mut server = start_server(
        &[],
        ServerOptions {
            shutdown_timeout: Duration::from_secs(2),
            ..ServerOptions::default()
        },
    );
    let base = server.base_url();
    let body = json!({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true,
                      "stream": true});
    let mut stream = client()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut reader = SseReader::default();
    let mut payloads = first_payloads(&mut stream, &mut reader, 1).await;
    let started = Instant::now();
    server.begin_shutdown();
    while let Some(bytes) = stream.chunk().await.unwrap() {
        payloads.extend(reader.feed(&bytes));
    }
    let ended = started.elapsed();
    assert!(
        ended < Duration::from_secs(4),
        "the stream ran {ended:?} past a 2 s drain limit"
    );
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(streamed_finish_reason(&chunks, 0).as_deref(), Some("abort"));
    while !server.has_stopped() {
        assert!(started.elapsed() < Duration::from_secs(6), "still up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
