//! SIGTERM with replies in flight: a stream still generating ends with a final chunk whose
//! `finish_reason` is `abort`, then `data: [DONE]`; a non-streamed reply ends as a 200 with
//! the text so far and `abort`; and the process exits 0, all within `--shutdown-timeout`.

use crate::common;

use std::time::{Duration, Instant};

use common::ServedBinary;
use serde_json::{json, Value};

/// The drain limit the server is started with; generation runs far longer than this.
const SHUTDOWN_TIMEOUT_S: u64 = 3;

/// Thousands of tokens: the request is still generating when the drain limit runs out.
fn long_request(stream: bool) -> Value {
    json!({
        "prompt": "Once upon a time",
        "max_tokens": 4000,
        "ignore_eos": true,
        "temperature": 0,
        "stream": stream,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_open_streams_with_a_finish_reason_and_done_and_exits_within_the_drain_limit()
{
    crate::common::skip_without_model!();
    let mut server = ServedBinary::start(&[
        "--num-kv-blocks",
        "512",
        "--shutdown-timeout",
        &SHUTDOWN_TIMEOUT_S.to_string(),
    ]);
    let client = reqwest::Client::new();
    let url = format!("{}/v1/completions", server.base_url);

    let collected = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move {
            let response = client.post(url).json(&long_request(false)).send().await;
            let response = response.expect("the non-streamed request is answered");
            (response.status(), response.json::<Value>().await.unwrap())
        }
    });
    let mut stream = client
        .post(&url)
        .json(&long_request(true))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);

    let mut buffer = String::new();
    let mut events: Vec<String> = Vec::new();
    let mut signalled_at = None;
    let mut stream_ended_at = None;
    while let Some(bytes) = stream.chunk().await.expect("the stream is not cut") {
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data = event
                .trim()
                .strip_prefix("data:")
                .unwrap()
                .trim()
                .to_owned();
            events.push(data);
        }
        // Signal once the stream has produced some text, so it is mid-generation.
        if signalled_at.is_none() && events.len() >= 3 {
            server.terminate();
            signalled_at = Some(Instant::now());
        }
        if events.last().map(String::as_str) == Some("[DONE]") {
            stream_ended_at = Some(Instant::now());
        }
    }
    let signalled_at = signalled_at.expect("the stream produced chunks before the signal");
    let stream_ended_at = stream_ended_at.expect("the stream ends with data: [DONE]");

    let limit = Duration::from_secs(SHUTDOWN_TIMEOUT_S);
    assert!(
        stream_ended_at - signalled_at <= limit,
        "the stream ended {:?} after SIGTERM; the drain limit is {limit:?}",
        stream_ended_at - signalled_at
    );
    assert_eq!(events.last().unwrap(), "[DONE]");
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "abort", "{last}");
    let finishes = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .count();
    assert_eq!(finishes, 1, "exactly one chunk carries the finish reason");

    let (status, body) = collected.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "abort", "{body}");
    assert!(!body["choices"][0]["text"].as_str().unwrap().is_empty());

    let exited = server
        .wait_for_exit(limit.saturating_sub(signalled_at.elapsed()) + Duration::from_millis(500));
    let status = exited.expect("the process exits within the drain limit");
    assert!(status.success(), "{status}");
}
