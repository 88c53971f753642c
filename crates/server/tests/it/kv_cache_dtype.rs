//! `--kv-cache-dtype q8_0` through HTTP: in the same `--kv-cache-memory-gib` the server holds
//! 64/34 times the f16 cache's tokens and says so in `/metrics` (the capacity in tokens and
//! vLLM's `cache_config_info` label), and it answers: a greedy completion has the same text
//! alone and among concurrent requests (the q8_0 cache keeps batch invariance).

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
    let memory = ["--kv-cache-memory-gib", "0.0625"];
    let f16 = common::start_server_sized_by(&[&memory[..], &["--kv-cache-dtype", "f16"]].concat());
    let q8 = common::start_server_sized_by(&[&memory[..], &["--kv-cache-dtype", "q8_0"]].concat());
    let (f16_tokens, f16_dtype) = capacity_and_dtype(&f16.base_url()).await;
    let (q8_tokens, q8_dtype) = capacity_and_dtype(&q8.base_url()).await;
    assert_eq!((f16_dtype.as_str(), q8_dtype.as_str()), ("float16", "q8_0"));
    let ratio = q8_tokens / f16_tokens;
    assert!(
        (1.87..=64.0 / 34.0 + 0.01).contains(&ratio),
        "q8_0 holds {q8_tokens} tokens, f16 {f16_tokens}: {ratio:.3} times"
    );
    drop(f16);

    let base = q8.base_url();
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
    assert_eq!(alone, together, "q8_0 answers changed when batched");
    assert!(alone.iter().all(|t| !t.is_empty()), "{alone:?}");
}
