//! Speculative decoding over HTTP: a server verifying n-gram drafts answers every request
//! exactly as one without speculation does — completions and chat, streamed and not, greedy
//! and seeded, with stop strings, max_tokens, logprobs, a JSON schema and tool calls — and
//! reports vLLM's spec_decode counters, under vLLM's names with `--metrics-compat vllm`.

use crate::common;

use common::{streamed_finish_reason, streamed_text};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::OnceLock;
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};
use tokenmill_server::metrics::MetricsCompat;

const NGRAM: &str =
    r#"{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}"#;

fn speculating() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        common::start_server(
            &["--speculative-config", NGRAM],
            ServerOptions {
                metrics_compat: Some(MetricsCompat::Vllm),
                ..ServerOptions::default()
            },
        )
    })
}

async fn post(server: &ServerHandle, path: &str, body: &Value) -> Value {
    let response = common::client()
        .post(format!("{}{path}", server.base_url()))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path} {body}");
    let mut reply: Value = response.json().await.unwrap();
    // What differs between any two replies.
    for key in ["id", "created", "system_fingerprint"] {
        reply.as_object_mut().unwrap().remove(key);
    }
    for choice in reply["choices"].as_array_mut().unwrap() {
        for call in choice["message"]["tool_calls"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            call.as_object_mut().unwrap().remove("id");
        }
    }
    reply
}

const PASSAGE: &str = "The mill by the river ground wheat for the village, and the miller kept a \
    ledger of every sack: who brought it, how heavy it was, and what was owed.";

fn workload() -> Vec<(&'static str, Value)> {
    let copy = format!("Repeat this sentence word for word: {PASSAGE}");
    let weather_schema = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"], "additionalProperties": false});
    vec![
        (
            "/v1/completions",
            json!({"prompt": format!("{PASSAGE}\n{PASSAGE}\n"), "max_tokens": 48, "temperature": 0, "logprobs": 2}),
        ),
        (
            "/v1/completions",
            json!({"prompt": format!("{PASSAGE}\n{PASSAGE}\n"), "max_tokens": 40, "temperature": 0.8, "seed": 11, "stop": ["sack"]}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": copy}], "max_tokens": 60, "temperature": 0, "logprobs": true, "top_logprobs": 2}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": copy}], "max_tokens": 60, "temperature": 0.7, "seed": 3, "n": 2, "stop": [" heavy"]}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": format!("Which city is in this text? Paris, Paris, Paris. Answer as JSON.")}],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": weather_schema, "strict": true}},
                   "max_tokens": 40, "temperature": 0}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "What is the weather in Paris? Paris!"}],
                   "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": weather_schema}}],
                   "tool_choice": "required", "max_tokens": 60, "temperature": 0}),
        ),
        (
            "/v1/completions",
            json!({"prompt": format!("{PASSAGE} {PASSAGE}"), "max_tokens": 7, "temperature": 0, "ignore_eos": true, "speculative": false}),
        ),
    ]
}

#[tokio::test]
async fn replies_are_identical_with_and_without_speculation() {
    crate::common::skip_without_model!();
    let plain = common::server();
    let spec = speculating();
    for (path, body) in workload() {
        let a = post(plain, path, &body).await;
        let b = post(spec, path, &body).await;
        assert_eq!(a, b, "{path} {body}");
    }
    let text = |s: &ServerHandle| {
        let url = format!("{}/metrics", s.base_url());
        async move { reqwest::get(url).await.unwrap().text().await.unwrap() }
    };
    let metrics = text(spec).await;
    for prefix in ["tokenmill", "vllm"] {
        let drafts = common::metric(
            &metrics,
            &format!("{prefix}:spec_decode_num_draft_tokens_total"),
        );
        let accepted = common::metric(
            &metrics,
            &format!("{prefix}:spec_decode_num_accepted_tokens_total"),
        );
        assert!(
            drafts > 0.0 && accepted > 0.0,
            "{prefix}: {drafts} drafted, {accepted} accepted"
        );
        assert!(
            metrics.contains(&format!(
                "{prefix}:spec_decode_num_accepted_tokens_per_pos_total{{"
            )),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn streamed_replies_are_identical_with_and_without_speculation() {
    crate::common::skip_without_model!();
    for (path, body) in workload().into_iter().take(4) {
        let mut body = body;
        body["stream"] = json!(true);
        let a = common::post_stream_to(common::server(), path, body.clone()).await;
        let b = common::post_stream_to(speculating(), path, body.clone()).await;
        for index in 0..2 {
            assert_eq!(streamed_text(&a, index), streamed_text(&b, index), "{body}");
            assert_eq!(
                streamed_finish_reason(&a, index),
                streamed_finish_reason(&b, index),
                "{body}"
            );
        }
    }
}

#[tokio::test]
async fn a_bad_speculative_config_is_refused_at_startup_with_its_reason() {
    for (json, needle) in [
        (r#"{"method":"ngram"}"#, "num_speculative_tokens"),
        (
            r#"{"method":"medusa","num_speculative_tokens":2}"#,
            "unknown method",
        ),
    ] {
        let args = ["test", "--speculative-config", json];
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            engine: tokenmill_engine::EngineArgs,
        }
        let cli = <Cli as clap::Parser>::parse_from(args);
        let err = tokenmill_server::model::model_loader::load(&cli.engine)
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(
            text.contains("--speculative-config") || text.contains("speculative_config"),
            "{text}"
        );
        assert!(text.contains(needle), "{text}");
    }
}
