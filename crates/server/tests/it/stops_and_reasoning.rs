//! `include_stop_str_in_output`, `chat_template_kwargs` and `--reasoning-parser`, over HTTP
//! against the real default model.

use crate::common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};
use tokenmill_server::tools::reasoning_parser::ReasoningParserKind;

const PROMPT: &str = "The capital of France is";
const MAX_TOKENS: usize = 24;

/// A stop string from the middle of the greedy completion, and where it starts.
fn stop_in(text: &str) -> (String, usize) {
    let start = text.len() / 3;
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i) && text[i..].starts_with(' '))
        .expect("the greedy completion has a space in its last two thirds");
    let stop: String = text[start..].chars().take(4).collect();
    (stop.clone(), text.find(&stop).unwrap())
}

#[tokio::test]
async fn include_stop_str_in_output_keeps_the_stop_string_at_the_end() {
    crate::common::skip_without_model!();
    let expected = reference().completion(PROMPT, greedy(MAX_TOKENS)).text;
    let (stop, at) = stop_in(&expected);
    for (include, end) in [(true, at + stop.len()), (false, at)] {
        let body = json!({"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0,
                          "stop": stop, "include_stop_str_in_output": include});
        let (status, reply) = post_json("/v1/completions", body.clone()).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["choices"][0]["text"], expected[..end], "{body}");
        assert_eq!(reply["choices"][0]["finish_reason"], "stop");
        let mut streamed = body;
        streamed["stream"] = json!(true);
        let chunks = post_stream("/v1/completions", streamed).await;
        assert_eq!(streamed_text(&chunks, 0), expected[..end]);
    }
}

fn chat_body(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "Name a fruit."}],
                          "max_tokens": 12, "temperature": 0});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn chat_template_kwargs_must_be_an_object_and_reach_the_template() {
    crate::common::skip_without_model!();
    let expected = reference().chat("Name a fruit.", greedy(12)).text;
    // SmolLM2's template reads no such variable, so the reply is the plain one.
    let body = chat_body(json!({"chat_template_kwargs": {"enable_thinking": false}}));
    let (status, reply) = post_json("/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["message"]["content"], expected);
    let body = chat_body(json!({"chat_template_kwargs": ["enable_thinking"]}));
    let (status, reply) = post_json("/v1/chat/completions", body).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["param"], "chat_template_kwargs");
}

fn reasoning_server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        let options = ServerOptions {
            reasoning_parser: Some(ReasoningParserKind::Qwen3),
            ..ServerOptions::default()
        };
        start_server(&[], options)
    })
}

async fn post_reasoning(body: Value) -> Value {
    let url = format!("{}/v1/chat/completions", reasoning_server().base_url());
    let response = client().post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// SmolLM2 never thinks: the parser must leave its answer whole and report no reasoning. The
/// splitting itself is held by `reasoning_parser`'s unit tests.
#[tokio::test]
async fn with_a_reasoning_parser_an_answer_without_a_think_block_is_all_content() {
    crate::common::skip_without_model!();
    let expected = reference().chat("Name a fruit.", greedy(12)).text;
    let reply = post_reasoning(chat_body(json!({}))).await;
    let message = &reply["choices"][0]["message"];
    assert_eq!(message["content"], expected);
    assert!(message["reasoning_content"].is_null(), "{reply}");
    let url = format!("{}/v1/chat/completions", reasoning_server().base_url());
    let response = client()
        .post(url)
        .json(&chat_body(json!({"stream": true})))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    let mut reader = SseReader::default();
    let chunks: Vec<Value> = reader
        .feed(text.as_bytes())
        .into_iter()
        .filter(|p| p != "[DONE]")
        .map(|p| serde_json::from_str(&p).unwrap())
        .collect();
    assert_eq!(streamed_text(&chunks, 0), expected);
    assert!(chunks
        .iter()
        .all(|c| c["choices"][0]["delta"].get("reasoning_content").is_none()));
}

#[tokio::test]
async fn a_reply_ends_at_the_models_other_end_of_turn_token_unless_it_ignores_eos() {
    crate::common::skip_without_model!();
    // SmolLM2's file names `<|im_end|>` (2) as its EOS; its `<|endoftext|>` (0) is a control
    // token that ends a turn too. The bias makes it every step's greedy token.
    let body = |ignore_eos: bool| {
        json!({"prompt": PROMPT, "max_tokens": 5, "temperature": 0,
               "logit_bias": {"0": 100}, "ignore_eos": ignore_eos})
    };
    let (status, reply) = post_json("/v1/completions", body(false)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop", "{reply}");
    assert_eq!(reply["usage"]["completion_tokens"], 1, "{reply}");
    assert_eq!(reply["choices"][0]["text"], "", "{reply}");
    let (status, reply) = post_json("/v1/completions", body(true)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "length", "{reply}");
    assert_eq!(reply["usage"]["completion_tokens"], 5, "{reply}");
}
