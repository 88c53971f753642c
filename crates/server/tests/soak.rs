//! Soak: 300 streaming requests at concurrency 32, random prompt and output lengths, about 30%
//! of clients leaving at a random point (before the headers, mid-stream, right after the last
//! chunk). Afterwards nothing is running or waiting, no KV block is held, no request got a 5xx
//! or a stream without its end, a greedy request still gets a fresh server's answer, and the
//! second half of the soak did not grow the process's resident memory. Then an overload: three
//! times `--max-waiting` requests at once, the excess refused fast with a 503 and Retry-After,
//! and the server recovers fully. Bounded to a few minutes in release on 2 cores;
//! `scripts/soak.sh` runs the same soak longer (`TOKENMILL_SOAK_REQUESTS`).

// Its own binary, not a module of `tests/it`: it measures this process's resident memory,
// which the servers and models of tests running beside it would grow.
#[path = "it/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::ServerOptions;
use tokio::sync::Semaphore;

/// Requests in the soak, unless `TOKENMILL_SOAK_REQUESTS` says more (`scripts/soak.sh`).
const REQUESTS: usize = 300;
const CONCURRENCY: usize = 32;
/// How much the soak's second half may grow the resident memory (see where it is checked).
const RESIDENT_GROWTH_BOUND: u64 = 16 << 20;

/// The two tests take turns: each measures this process (its memory, its answer times),
/// which the other's server would share.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The soak's request count: at least `REQUESTS`, so the leak bound below keeps its meaning,
/// and even, for two equal halves.
fn requests() -> usize {
    let asked = std::env::var("TOKENMILL_SOAK_REQUESTS").map(|v| {
        v.parse::<usize>()
            .unwrap_or_else(|_| panic!("TOKENMILL_SOAK_REQUESTS={v:?} is not a count"))
    });
    asked.map_or(REQUESTS, |n| n.max(REQUESTS) / 2 * 2)
}

/// Resident memory of this process, which runs the server, from `/proc/self/status`.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib << 10
}

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
    (0..requests())
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

/// Waits until nothing runs or waits and no KV block is held, failing after 30 s.
async fn assert_drains(base: &str, after_what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let (running, waiting, kv) = (
            metric(&text, "tokenmill:num_requests_running"),
            metric(&text, "tokenmill:num_requests_waiting"),
            metric(&text, "tokenmill:kv_cache_usage_perc"),
        );
        if running == 0.0 && waiting == 0.0 && kv == 0.0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {after_what}: {running} running, {waiting} waiting, KV usage {kv}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn greedy_text(base: &str) -> String {
    let body =
        json!({"prompt": "The three primary colors are", "max_tokens": 24, "temperature": 0});
    let (_, reply) = post_json_to(base, "/v1/completions", body).await;
    reply["choices"][0]["text"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_with_random_disconnects_leaves_no_work_no_kv_and_the_same_greedy_answers() {
    crate::common::skip_without_model!();
    let _turn = ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let base = server().base_url();
    let before = greedy_text(&base).await;

    let http = reqwest::Client::new();
    let tally = Arc::new(Tally::default());
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let plan = plan(0x5eed_50a4);
    // Resident memory after each half: the first half brings the allocator's caches, the
    // touched pages of the KV pool and the thread pools to their working size.
    let mut resident = Vec::new();
    for half in plan.chunks(plan.len() / 2) {
        let mut tasks = Vec::new();
        for (body, client) in half.iter().cloned() {
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
        resident.push(resident_bytes());
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
    assert_eq!(completed + left, plan.len());
    assert!(left >= plan.len() / 5, "only {left} clients left early");

    // The engine notices dropped streams within a step; give it a few.
    assert_drains(&base, "the soak").await;

    // The second half serves the same mix as the first, so memory it keeps is a leak. A
    // leaked logits row (49152 floats, 192 KiB) per request would keep about 28 MiB; allocator
    // noise between two equal halves is a few MiB (2 MiB, on 339, measured on two busy cores).
    let grown = resident[1].saturating_sub(resident[0]);
    eprintln!(
        "soak: resident {} MiB, then {} MiB",
        resident[0] >> 20,
        resident[1] >> 20
    );
    assert!(
        grown < RESIDENT_GROWTH_BOUND,
        "the second half of the soak grew resident memory by {} MiB ({} MiB after the first)",
        grown >> 20,
        resident[0] >> 20
    );

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

const MAX_WAITING: usize = 16;
const MAX_RUNNING: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_times_max_waiting_at_once_refuses_the_excess_fast_and_the_server_recovers() {
    crate::common::skip_without_model!();
    let _turn = ONE_AT_A_TIME.lock().await;
    let flags = [
        "--max-waiting",
        &MAX_WAITING.to_string(),
        "--max-num-seqs",
        &MAX_RUNNING.to_string(),
    ]
    .map(String::from);
    let server = tokio::task::spawn_blocking(move || {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        start_server(&flags, ServerOptions::default())
    })
    .await
    .unwrap();
    let base = server.base_url();
    let before = greedy_text(&base).await;

    // Each accepted request holds its place for 32 decode steps, far longer than sending the
    // burst takes, so the places (16 waiting, 8 running) fill before any is freed.
    let http = reqwest::Client::new();
    let body = json!({"prompt": "river stone", "max_tokens": 32, "ignore_eos": true});
    let burst: Vec<_> = (0..3 * MAX_WAITING)
        .map(|_| {
            let request = http.post(format!("{base}/v1/completions")).json(&body);
            tokio::spawn(async move {
                let sent = Instant::now();
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let retry_after = response.headers().contains_key("retry-after");
                let reply: Value = response.json().await.unwrap();
                (status, retry_after, reply, sent.elapsed())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for answer in burst {
        answers.push(answer.await.unwrap());
    }

    let served: Vec<_> = answers.iter().filter(|a| a.0 == 200).collect();
    let refused: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    assert_eq!(
        served.len() + refused.len(),
        answers.len(),
        "only 200 and 503: {:?}",
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    // At least the third beyond twice the queue, even if a place freed up mid-burst.
    assert!(
        refused.len() >= MAX_WAITING && !served.is_empty(),
        "{} served, {} refused",
        served.len(),
        refused.len()
    );
    for (_, _, reply, _) in &served {
        assert_eq!(reply["usage"]["completion_tokens"], 32, "{reply}");
    }
    // Refused at the door: faster than any accepted request, which decodes 32 tokens first.
    let fastest_served = served.iter().map(|a| a.3).min().unwrap();
    for (_, retry_after, reply, took) in &refused {
        assert!(retry_after, "a 503 without Retry-After: {reply}");
        assert!(reply["error"]["message"].is_string(), "{reply}");
        assert!(
            *took < fastest_served,
            "a 503 took {took:?}, the fastest 200 {fastest_served:?}"
        );
    }

    assert_drains(&base, "the overload").await;
    assert_eq!(
        greedy_text(&base).await,
        before,
        "the overloaded server's greedy answer changed"
    );
    tokio::task::spawn_blocking(move || server.shutdown())
        .await
        .unwrap();
}
