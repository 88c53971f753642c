//! Soak: 300 streaming requests at concurrency 32, random prompt and output lengths, about 30%
//! of clients leaving at a random point (before the headers, mid-stream, right after the last
//! chunk). Afterwards nothing is running or waiting, no KV block is held, no request got a 5xx
//! or a stream without its end, and a greedy request still gets a fresh server's answer.
//! Bounded to a few minutes in release on 2 cores.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokenmill_server::api_server::ServerOptions;
use tokio::sync::Semaphore;

const REQUESTS: usize = 300;
const CONCURRENCY: usize = 32;

/// A small deterministic generator (xorshift), so a failing soak can be rerun as it was.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy)]
enum Client {
    /// Reads the stream to `[DONE]`.
    Stays,
    /// Gives up after this many milliseconds, likely before the response headers.
    LeavesBeforeHeaders(u64),
    /// Drops the stream after this many chunks.
    LeavesMidStream(usize),
    /// Drops the connection as soon as `[DONE]` arrives, without reading the close.
    LeavesAtTheEnd,
}

#[derive(Default)]
struct Tally {
    completed: AtomicUsize,
    left: AtomicUsize,
    failures: std::sync::Mutex<Vec<String>>,
}

fn plan(seed: u64) -> Vec<(Value, Client)> {
    const WORDS: [&str; 12] = [
        "river", "stone", "quiet", "market", "seven", "lantern", "north", "bread", "glass",
        "winter", "story", "garden",
    ];
    let mut rng = Rng(seed);
    (0..REQUESTS)
        .map(|_| {
            let words = 1 + rng.below(100) as usize;
            let prompt: Vec<&str> = (0..words)
                .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
                .collect();
            let body = json!({
                "prompt": prompt.join(" "),
                "max_tokens": 1 + rng.below(48),
                "temperature": 0.8,
                "seed": rng.below(1000),
                "ignore_eos": rng.below(2) == 0,
                "stream": true,
            });
            let client = match rng.below(10) {
                0 => Client::LeavesBeforeHeaders(rng.below(30)),
                1 => Client::LeavesMidStream(1 + rng.below(20) as usize),
                2 => Client::LeavesAtTheEnd,
                _ => Client::Stays,
            };
            (body, client)
        })
        .collect()
}

async fn run_one(http: reqwest::Client, base: String, body: Value, client: Client, tally: &Tally) {
    let send = http
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send();
    let response = match client {
        Client::LeavesBeforeHeaders(ms) => {
            match tokio::time::timeout(Duration::from_millis(ms), send).await {
                Err(_) => {
                    tally.left.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Ok(response) => response,
            }
        }
        _ => send.await,
    };
    let fail = |why: String| tally.failures.lock().unwrap().push(why);
    let mut response = match response {
        Ok(r) if r.status() == 200 => r,
        Ok(r) => return fail(format!("status {} for {body}", r.status())),
        Err(e) => return fail(format!("request failed: {e}")),
    };
    let mut reader = SseReader::default();
    let (mut chunks, mut finish_reason) = (0usize, None::<String>);
    loop {
        let bytes = match response.chunk().await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return fail(format!("stream ended without [DONE] for {body}")),
            Err(e) => return fail(format!("stream cut: {e}")),
        };
        for payload in reader.feed(&bytes) {
            if payload == "[DONE]" {
                if finish_reason.is_none() {
                    return fail(format!("no finish_reason before [DONE] for {body}"));
                }
                match client {
                    Client::LeavesAtTheEnd => tally.left.fetch_add(1, Ordering::Relaxed),
                    _ => tally.completed.fetch_add(1, Ordering::Relaxed),
                };
                return;
            }
            let chunk: Value = serde_json::from_str(&payload).unwrap();
            if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
                finish_reason = Some(reason.to_owned());
            }
            chunks += 1;
            if matches!(client, Client::LeavesMidStream(n) if chunks >= n) {
                tally.left.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

async fn greedy_text(base: &str) -> String {
    let body =
        json!({"prompt": "The three primary colors are", "max_tokens": 24, "temperature": 0});
    let reply: Value = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    reply["choices"][0]["text"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_with_random_disconnects_leaves_no_work_no_kv_and_the_same_greedy_answers() {
    let started = Instant::now();
    let base = server().base_url();
    let before = greedy_text(&base).await;

    let http = reqwest::Client::new();
    let tally = Arc::new(Tally::default());
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = Vec::new();
    for (body, client) in plan(0x5eed_50a4) {
        let permit = permits.clone().acquire_owned().await.unwrap();
        let (http, base, tally) = (http.clone(), base.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            run_one(http, base, body, client, &tally).await;
            drop(permit);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (completed, left) = (
        tally.completed.load(Ordering::Relaxed),
        tally.left.load(Ordering::Relaxed),
    );
    let failures = tally.failures.lock().unwrap().clone();
    eprintln!(
        "soak: {completed} completed, {left} left early, {} failed, {:?}",
        failures.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} failures: {failures:#?}",
        failures.len()
    );
    assert_eq!(completed + left, REQUESTS);
    assert!(left >= REQUESTS / 5, "only {left} clients left early");

    // The engine notices dropped streams within a step; give it a few.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, text) = get_text("/metrics").await;
        let (running, waiting, kv) = (
            metric(&text, "tokenmill:num_requests_running"),
            metric(&text, "tokenmill:num_requests_waiting"),
            metric(&text, "tokenmill:kv_cache_usage_perc"),
        );
        if running == 0.0 && waiting == 0.0 && kv == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the soak: {running} running, {waiting} waiting, KV usage {kv}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let after = greedy_text(&base).await;
    assert_eq!(after, before, "the soaked server's greedy answer changed");
    let fresh = tokio::task::spawn_blocking(|| start_server(&[], ServerOptions::default()))
        .await
        .unwrap();
    let fresh_text = greedy_text(&fresh.base_url()).await;
    tokio::task::spawn_blocking(move || fresh.shutdown())
        .await
        .unwrap();
    assert_eq!(
        after, fresh_text,
        "the soaked server answers unlike a fresh one"
    );
    eprintln!("soak done in {:?}", started.elapsed());
}
