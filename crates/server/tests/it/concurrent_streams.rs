//! Many clients at once: each stream gets its own, correct output.

use crate::common;

use common::*;
use serde_json::json;

const STREAMS: usize = 32;
const MAX_TOKENS: usize = 16;

fn prompt(i: usize) -> String {
    format!("Write a sentence about the number {i}:")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_streams_each_equal_their_own_greedy_result() {
    crate::common::skip_without_model!();
    server();
    let expected: Vec<Expected> = (0..STREAMS)
        .map(|i| reference().completion(&prompt(i), greedy(MAX_TOKENS)))
        .collect();
    let tasks: Vec<_> = (0..STREAMS)
        .map(|i| {
            tokio::spawn(post_stream(
                "/v1/completions",
                json!({"prompt": prompt(i), "max_tokens": MAX_TOKENS, "temperature": 0,
                       "stream": true, "stream_options": {"include_usage": true}}),
            ))
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let chunks = task.await.unwrap();
        assert_eq!(streamed_text(&chunks, 0), expected[i].text, "stream {i}");
        let usage = &chunks.last().unwrap()["usage"];
        assert_eq!(
            usage["completion_tokens"],
            expected[i].token_ids.len(),
            "stream {i}"
        );
        assert_eq!(
            usage["prompt_tokens"], expected[i].prompt_tokens,
            "stream {i}"
        );
    }
}
