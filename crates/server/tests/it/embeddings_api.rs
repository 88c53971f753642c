//! `POST /v1/embeddings` through HTTP: the official `openai` package's `embeddings.create`
//! (its default base64, float, lists of texts and of token ids, and its typed errors for a
//! refused `dimensions` and empty inputs), vectors equal to the engine's own to the bit, the
//! limits, the metrics, and `--pooler-config` serving a zoo model's mean pool as transformers
//! computes it.

use std::path::Path;

use clap::Parser;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{spawn_server, ServeArgs, ServerHandle};
use tokenmill_server::model::model_loader;

use crate::common::{self, *};

/// SmolLM2-135M's hidden size.
const HIDDEN: usize = 576;

fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .expect("a list of floats")
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn the_openai_python_client_embeds_text_and_token_ids_in_float_and_base64() {
    crate::common::skip_without_model!();
    let base = server().base_url();
    common::python_client::run_client_script(
        "openai_embeddings_sdk.py",
        common::python_client::Package::Required("openai"),
        &[&base, "SmolLM2-135M-Instruct.Q4_1", &HIDDEN.to_string()],
    );
}

#[tokio::test]
async fn served_vectors_are_the_engines_own_bits_and_count_as_prompt_tokens() {
    crate::common::skip_without_model!();
    let texts = [
        "Paris is the capital of France.",
        "Rust has no garbage collector.",
    ];
    let before = metric(
        &metrics_text(&server().base_url()).await,
        "tokenmill:prompt_tokens_total",
    );
    let (status, reply) = post_json(
        "/v1/embeddings",
        json!({"input": texts, "encoding_format": "float"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let r = reference();
    let mut tokens = 0;
    for (i, text) in texts.iter().enumerate() {
        let ids = r.tokenizer.encode(text, true).unwrap();
        tokens += ids.len();
        let want = r.embed(ids);
        let data = &reply["data"][i];
        assert_eq!(data["index"], i);
        assert_eq!(data["object"], "embedding");
        let got = floats(&data["embedding"]);
        assert_eq!(got.len(), HIDDEN);
        assert!(
            got.iter()
                .map(|v| v.to_bits())
                .eq(want.iter().map(|v| v.to_bits())),
            "input {i}: the served vector is not the engine's"
        );
    }
    assert_eq!(
        reply["usage"],
        json!({"prompt_tokens": tokens, "total_tokens": tokens})
    );
    assert_eq!(reply["object"], "list");
    let after = metric(
        &metrics_text(&server().base_url()).await,
        "tokenmill:prompt_tokens_total",
    );
    // Other tests share the server, so at least this request's tokens.
    assert!(after - before >= tokens as f64, "{before} → {after}");
}

#[tokio::test]
async fn inputs_beyond_the_context_or_outside_the_vocabulary_are_refused_with_a_400() {
    crate::common::skip_without_model!();
    let (_, tokenized) = post_json("/tokenize", json!({"prompt": "x"})).await;
    let max = tokenized["max_model_len"].as_u64().unwrap() as usize;
    let (status, reply) = post_json(
        "/v1/embeddings",
        json!({"input": [vec![1u32; 2], vec![1u32; max + 1]]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("input 1") && message.contains(&max.to_string()),
        "{message}"
    );
    assert_eq!(reply["error"]["param"], "input");
    let (status, reply) = post_json("/v1/embeddings", json!({"input": [10_000_000]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    let (status, reply) = post_json("/v1/embeddings", json!({"prompt": "a"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    assert_eq!(
        reply["error"]["param"], "prompt",
        "an unknown field named: {reply}"
    );
    // Every refusal left the engine idle.
    let (_, info) = post_json("/tokenize", json!({"prompt": "x"})).await;
    assert_eq!(info["count"], 1);
}

#[derive(Deserialize)]
struct Fixture {
    models: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Case>>,
}

#[derive(Deserialize)]
struct Case {
    prompt_ids: Vec<u32>,
    mean: Vec<f64>,
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// `tokenmill serve` with `flags` on a zoo model, as `serve` would start it.
fn serve(model: &Path, flags: &[&str]) -> ServerHandle {
    let args = [
        "serve",
        "--model",
        model.to_str().unwrap(),
        "--num-kv-blocks",
        "64",
    ]
    .into_iter()
    .chain(flags.iter().copied());
    let cli = Cli::try_parse_from(args).expect("the flags parse");
    let loaded = model_loader::load_with(&cli.serve.engine, &cli.serve.text).unwrap();
    spawn_server(loaded, cli.serve.options(), "127.0.0.1:0".parse().unwrap()).unwrap()
}

/// No default model needed: the zoo's tiny Qwen3 on the exact path, mean-pooled by
/// `--pooler-config`, against transformers' mean of its final hidden states.
#[tokio::test]
async fn the_pooler_config_flag_serves_mean_pooling_as_transformers_computes_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/zoo_embeddings.json");
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = &fixture.models["tiny-qwen3"];
    let server = serve(
        &common::model::zoo("tiny-qwen3").join("model-f32.gguf"),
        &[
            "--weight-mode",
            "f32",
            "--kv-cache-dtype",
            "f32",
            "--pooler-config",
            r#"{"pooling_type": "MEAN"}"#,
        ],
    );
    let inputs: Vec<&Vec<u32>> = cases.values().map(|c| &c.prompt_ids).collect();
    let (status, reply) = post_json_to(
        &server.base_url(),
        "/v1/embeddings",
        json!({"input": inputs, "encoding_format": "float"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    for (i, case) in cases.values().enumerate() {
        let got = floats(&reply["data"][i]["embedding"]);
        let dot: f64 = got
            .iter()
            .zip(&case.mean)
            .map(|(&a, &b)| a as f64 * b)
            .sum();
        // Both are unit vectors: the dot is the cosine.
        assert!(dot >= 0.99999, "input {i}: cosine {dot} to transformers");
    }
    let (status, reply) = post_json_to(
        &server.base_url(),
        "/v1/embeddings",
        json!({"input": [1, 2, 3], "dimensions": 16}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(reply["error"]["param"], "dimensions");
    // /v1/models is as before.
    let models: Value = client()
        .get(format!("{}/v1/models", server.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
}

#[test]
fn a_bad_pooler_config_stops_serve_naming_the_flag() {
    let parsed = Cli::try_parse_from(["serve", "--pooler-config", r#"{"pooling_type": "CLS"}"#]);
    let error = parsed.err().expect("refused").to_string();
    assert!(
        error.contains("--pooler-config") && error.contains("CLS"),
        "{error}"
    );
}
