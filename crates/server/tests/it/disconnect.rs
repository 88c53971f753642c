//! A client that goes away mid-stream aborts its request: the engine frees its KV blocks.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_frees_its_kv_blocks() {
    crate::common::skip_without_model!();
    let mut response = client()
        .post(url("/v1/completions"))
        .json(
            &json!({"prompt": "Tell me a very long story.", "max_tokens": 1500,
                      "ignore_eos": true, "stream": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = SseReader::default();
    first_payloads(&mut response, &mut reader, 3).await;
    let (_, during) = get_text("/metrics").await;
    assert_eq!(metric(&during, "tokenmill:num_requests_running"), 1.0);
    assert!(metric(&during, "tokenmill:kv_cache_usage_perc") > 0.0);
    drop(response);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, after) = get_text("/metrics").await;
        let running = metric(&after, "tokenmill:num_requests_running");
        let usage = metric(&after, "tokenmill:kv_cache_usage_perc");
        if running == 0.0 && usage == 0.0 {
            let aborted = "tokenmill:request_success_total{model_name=\"SmolLM2-135M-Instruct.Q4_1\",finished_reason=\"abort\"}";
            assert_eq!(metric(&after, aborted), 1.0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running {running}, KV usage {usage}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) = post_json("/v1/completions", json!({"prompt": "Hi", "max_tokens": 2})).await;
    assert_eq!(status, 200);
}
