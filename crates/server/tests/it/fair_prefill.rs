//! Fair prefill through HTTP with the default flags: a short request sent while a long prompt
//! prefills is answered before the long prompt's first token.

use crate::common;

use common::*;
use serde_json::json;
use std::time::Instant;

/// Three full steps of the default 512-token budget: a scheduler that gives each step's whole
/// budget to the long prompt leaves no room for the short one until after its last chunk.
const LONG_PROMPT: usize = 3 * 512;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_request_sent_during_a_long_prefill_is_answered_first() {
    crate::common::skip_without_model!();
    server();
    let long: Vec<u32> = (0..LONG_PROMPT as u32)
        .map(|i| 100 + i * 7 % 20_000)
        .collect();
    let long_task = tokio::spawn(async move {
        let reply = post_json(
            "/v1/completions",
            json!({"prompt": long, "max_tokens": 1, "temperature": 0}),
        )
        .await;
        (reply, Instant::now())
    });
    // The short request leaves once the long prompt is running, in its first chunks.
    let started = Instant::now();
    loop {
        let (_, text) = get_text("/metrics").await;
        if metric(&text, "tokenmill:num_requests_running") >= 1.0 {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "the long prompt never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let (status, short) = post_json(
        "/v1/completions",
        json!({"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0}),
    )
    .await;
    let short_done = Instant::now();
    assert_eq!(status, 200, "{short}");
    let ((status, long_reply), long_done) = long_task.await.unwrap();
    assert_eq!(status, 200, "{long_reply}");
    assert_eq!(long_reply["usage"]["prompt_tokens"], LONG_PROMPT);
    assert!(
        short_done < long_done,
        "the short request waited for the long prompt: done {:?} after it",
        short_done - long_done
    );
}
