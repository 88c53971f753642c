//! `--kv-cache-dtype q8_0` and `fp8` through HTTP: in the same `--kv-cache-memory-gib` the
//! server holds 64/34 (q8_0) or 128/66 (fp8, head dim 64) times the f16 cache's tokens and
//! says so in `/metrics` (the capacity in tokens and vLLM's `cache_config_info` label), and
//! it answers: a greedy completion has the same text alone and among concurrent requests
//! (the 8-bit caches keep batch invariance).

use crate::common::{self, client, metrics_text};
use futures_util::future::join_all;
use serde_json::{json, Value};

/// The short-context capacity in tokens and the `cache_dtype` label `/metrics` shows.
async fn capacity_and_dtype(base: &str) -> (f64, String) {
    let text = metrics_text(base).await;
    let capacity = text
        .lines()
        .find(|l| {
            l.starts_with("tokenmill:kv_cache_capacity_tokens{") && l.contains("context=\"short\"")
        })
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v.parse::<f64>().unwrap())
        .unwrap_or_else(|| panic!("no short-context capacity in /metrics:\n{text}"));
    let dtype = text
        .split("cache_dtype=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no cache_config_info in /metrics:\n{text}"))
        .to_owned();
    (capacity, dtype)
}

async fn complete(base: &str, prompt: &str) -> String {
    let body = json!({"prompt": prompt, "max_tokens": 24, "temperature": 0});
    let reply: Value = client()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    reply["choices"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no completion text: {reply}"))
        .to_owned()
}

#[tokio::test]
async fn a_q8_0_server_holds_64_34ths_of_f16s_tokens_and_answers_the_same_alone_and_batched() {
    common::skip_without_model!();
    holds_more_tokens_and_answers_alike("q8_0", 64.0 / 34.0).await;
}

/// `fp8` at SmolLM2's head dim of 64: 66 bytes per head's row against f16's 128.
#[tokio::test]
async fn an_fp8_server_holds_128_66ths_of_f16s_tokens_and_answers_the_same_alone_and_batched() {
    common::skip_without_model!();
    holds_more_tokens_and_answers_alike("fp8", 128.0 / 66.0).await;
}

/// A server with `--kv-cache-dtype dtype` holds `ratio` times an f16 server's tokens in
/// the same memory (to within a block), shows `dtype` as `/metrics`' `cache_dtype`, and
/// answers the same alone and batched.
async fn holds_more_tokens_and_answers_alike(dtype: &str, ratio: f64) {
    let memory = ["--kv-cache-memory-gib", "0.0625"];
    let f16 = common::start_server_sized_by(&[&memory[..], &["--kv-cache-dtype", "f16"]].concat());
    let quantized =
        common::start_server_sized_by(&[&memory[..], &["--kv-cache-dtype", dtype]].concat());
    let (f16_tokens, f16_dtype) = capacity_and_dtype(&f16.base_url()).await;
    let (tokens, got_dtype) = capacity_and_dtype(&quantized.base_url()).await;
    assert_eq!((f16_dtype.as_str(), got_dtype.as_str()), ("float16", dtype));
    let got = tokens / f16_tokens;
    assert!(
        (ratio - 0.01..=ratio + 0.01).contains(&got),
        "{dtype} holds {tokens} tokens, f16 {f16_tokens}: {got:.3} times, not {ratio:.3}"
    );
    drop(f16);

    let base = quantized.base_url();
    let prompts = [
        "The capital of France is",
        "Once upon a time, in a small village by the sea,",
        "def fibonacci(n):",
        "The three primary colours are",
    ];
    let mut alone = Vec::new();
    for p in prompts {
        alone.push(complete(&base, p).await);
    }
    let together = join_all(prompts.iter().map(|p| complete(&base, p))).await;
    assert_eq!(alone, together, "{dtype} answers changed when batched");
    assert!(alone.iter().all(|t| !t.is_empty()), "{alone:?}");
}
