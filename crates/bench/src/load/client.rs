//! Sends one streamed request and records when each piece of content arrived.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::load::bench_request::{BenchRequest, Prompt};
use crate::load::endpoint::Endpoint;
use crate::load::reply_drafts::ReplyDrafts;
use crate::load::sse::SseParser;
use crate::load::target_server::TargetServer;

/// What the load generator needs to send requests to one server.
#[derive(Clone, Debug)]
pub struct RequestTarget {
    pub server: TargetServer,
    pub endpoint: Endpoint,
    pub model: String,
    pub ignore_eos: bool,
    /// Keys added to every request body (`--extra-body`).
    pub extra_body: serde_json::Map<String, Value>,
    pub timeout: Duration,
}

/// The measured life of one request.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    pub sent_at: Instant,
    pub finished_at: Instant,
    /// The server's `usage.prompt_tokens` when given, else the dataset's count.
    pub prompt_len: usize,
    pub outcome: Result<Reply, String>,
}

/// Timings of a successful streamed reply, relative to the moment the request was sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// Arrival of every chunk that carried content.
    pub content_offsets: Vec<Duration>,
    /// `usage.completion_tokens`, when the server reported it.
    pub usage_completion_tokens: Option<usize>,
    /// The generated text, content chunks joined (kept to compare replies across servers).
    pub text: String,
    /// Draft counts the server reported in the reply's `timings` (llama-server).
    pub drafts: Option<ReplyDrafts>,
}

impl Reply {
    pub fn ttft(&self) -> Duration {
        self.content_offsets[0]
    }

    pub fn e2el(&self) -> Duration {
        *self.content_offsets.last().expect("a reply has content")
    }

    pub fn itls(&self) -> impl Iterator<Item = Duration> + '_ {
        self.content_offsets
            .windows(2)
            .map(|pair| pair[1] - pair[0])
    }

    /// Output tokens: the server's count, or the content chunks when it gave none.
    pub fn output_tokens(&self) -> usize {
        self.usage_completion_tokens
            .unwrap_or(self.content_offsets.len())
    }

    /// Seconds per output token after the first, defined only for two or more tokens.
    pub fn tpot(&self) -> Option<Duration> {
        let tokens = self.output_tokens();
        (tokens > 1).then(|| (self.e2el() - self.ttft()) / (tokens as u32 - 1))
    }
}

impl RequestRecord {
    pub fn reply(&self) -> Option<&Reply> {
        self.outcome.as_ref().ok()
    }
}

/// Sends `request` and follows its stream to the end; failures become records, not errors.
pub async fn send(target: &RequestTarget, request: &BenchRequest) -> RequestRecord {
    let sent_at = Instant::now();
    let streamed = tokio::time::timeout(target.timeout, stream(target, request, sent_at)).await;
    let finished_at = Instant::now();
    let (outcome, usage_prompt) = match streamed {
        Ok(Ok((reply, usage_prompt))) => (Ok(reply), usage_prompt),
        Ok(Err(message)) => (Err(message), None),
        Err(_) => (
            Err(format!(
                "timed out after {:.1} s",
                target.timeout.as_secs_f64()
            )),
            None,
        ),
    };
    RequestRecord {
        sent_at,
        finished_at,
        prompt_len: usage_prompt.unwrap_or(request.prompt_len),
        outcome,
    }
}

async fn stream(
    target: &RequestTarget,
    request: &BenchRequest,
    sent_at: Instant,
) -> Result<(Reply, Option<usize>), String> {
    let url = target.server.generation_url(target.endpoint);
    let mut response = target
        .server
        .http()
        .post(&url)
        .json(&request_body(target, request))
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(format!(
            "HTTP {status}: {}",
            body.chars().take(300).collect::<String>()
        ));
    }
    let mut parser = SseParser::default();
    let mut progress = StreamProgress::default();
    while let Some(bytes) = response
        .chunk()
        .await
        .map_err(|e| format!("stream broke: {e}"))?
    {
        // Every message in one read shares its arrival time: that is when the client saw them.
        let offset = sent_at.elapsed();
        for payload in parser.feed(&bytes) {
            if progress.absorb(&payload, offset, target.endpoint)? {
                return progress.finish();
            }
        }
    }
    progress.finish()
}

/// What the stream has delivered so far.
#[derive(Default)]
struct StreamProgress {
    content_offsets: Vec<Duration>,
    completion_tokens: Option<usize>,
    prompt_tokens: Option<usize>,
    text: String,
    drafts: Option<ReplyDrafts>,
}

impl StreamProgress {
    /// Takes one SSE payload; returns true at `[DONE]`.
    fn absorb(
        &mut self,
        payload: &str,
        offset: Duration,
        endpoint: Endpoint,
    ) -> Result<bool, String> {
        let payload = payload.trim();
        if payload == "[DONE]" {
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(payload)
            .map_err(|e| format!("bad stream chunk ({e}): {payload:.200}"))?;
        if let Some(error) = chunk.get("error") {
            return Err(format!("server error in stream: {error}"));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.completion_tokens = usage["completion_tokens"].as_u64().map(|n| n as usize);
            self.prompt_tokens = usage["prompt_tokens"].as_u64().map(|n| n as usize);
        }
        // llama-server's counts are the request's totals so far: the last chunk's are final.
        if let Some(drafts) = chunk.get("timings").and_then(ReplyDrafts::from_timings) {
            self.drafts = Some(drafts);
        }
        if let Some(text) = chunk_content(&chunk, endpoint).filter(|text| !text.is_empty()) {
            self.content_offsets.push(offset);
            self.text.push_str(text);
        }
        Ok(false)
    }

    fn finish(self) -> Result<(Reply, Option<usize>), String> {
        if self.content_offsets.is_empty() {
            return Err("stream ended without any content".to_owned());
        }
        let reply = Reply {
            content_offsets: self.content_offsets,
            usage_completion_tokens: self.completion_tokens,
            text: self.text,
            drafts: self.drafts,
        };
        Ok((reply, self.prompt_tokens))
    }
}

fn chunk_content(chunk: &Value, endpoint: Endpoint) -> Option<&str> {
    let choice = chunk.get("choices")?.get(0)?;
    match endpoint {
        Endpoint::Completions => choice.get("text")?.as_str(),
        Endpoint::Chat => {
            let delta = choice.get("delta")?;
            // Reasoning models stream their thinking first; those are output tokens too.
            delta["content"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| delta["reasoning_content"].as_str())
        }
    }
}

fn request_body(target: &RequestTarget, request: &BenchRequest) -> Value {
    let mut body = json!({
        "model": target.model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": request.output_len,
        "temperature": 0.0,
    });
    if target.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    match (target.endpoint, &request.prompt) {
        (Endpoint::Completions, Prompt::Text(text)) => body["prompt"] = json!(text),
        (Endpoint::Completions, Prompt::TokenIds(ids)) => body["prompt"] = json!(ids),
        (Endpoint::Chat, prompt) => {
            body["messages"] = json!([{"role": "user", "content": prompt_text(prompt)}]);
            body["max_completion_tokens"] = json!(request.output_len);
        }
    }
    for (key, value) in &target.extra_body {
        body[key] = value.clone();
    }
    body
}

/// Chat needs text; token-id prompts are only built for completions, so this is a safe rendering.
fn prompt_text(prompt: &Prompt) -> String {
    match prompt {
        Prompt::Text(text) => text.clone(),
        Prompt::TokenIds(ids) => ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn role_only_chat_chunk_is_not_content() {
        let mut progress = StreamProgress::default();
        let role = r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        let text = r#"{"choices":[{"delta":{"content":"hi"}}]}"#;
        progress.absorb(role, ms(1), Endpoint::Chat).unwrap();
        progress.absorb(text, ms(40), Endpoint::Chat).unwrap();
        assert_eq!(progress.content_offsets, vec![ms(40)]);
    }

    #[test]
    fn usage_chunk_gives_token_counts_and_done_ends_the_stream() {
        let mut progress = StreamProgress::default();
        progress
            .absorb(
                r#"{"choices":[{"text":"a"}]}"#,
                ms(5),
                Endpoint::Completions,
            )
            .unwrap();
        let usage =
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#;
        assert!(!progress
            .absorb(usage, ms(6), Endpoint::Completions)
            .unwrap());
        assert!(progress
            .absorb("[DONE]", ms(6), Endpoint::Completions)
            .unwrap());
        let (reply, prompt_tokens) = progress.finish().unwrap();
        assert_eq!(
            (reply.usage_completion_tokens, prompt_tokens),
            (Some(3), Some(7))
        );
    }

    #[test]
    fn content_chunks_join_into_the_text_and_the_last_timings_give_the_drafts() {
        let mut progress = StreamProgress::default();
        for (payload, at) in [
            (r#"{"choices":[{"delta":{"content":"Hello"}}]}"#, 10),
            (
                r#"{"choices":[{"delta":{"content":", world"}}],"timings":{"draft_n":4,"draft_n_accepted":1}}"#,
                20,
            ),
            (
                r#"{"choices":[{"delta":{}, "finish_reason":"stop"}],"timings":{"draft_n":9,"draft_n_accepted":5}}"#,
                30,
            ),
        ] {
            progress.absorb(payload, ms(at), Endpoint::Chat).unwrap();
        }
        let (reply, _) = progress.finish().unwrap();
        assert_eq!(reply.text, "Hello, world");
        assert_eq!(reply.content_offsets, vec![ms(10), ms(20)]);
        assert_eq!(
            reply.drafts,
            Some(ReplyDrafts {
                draft_tokens: 9,
                accepted_tokens: 5
            })
        );
    }

    #[test]
    fn error_chunk_fails_the_request() {
        let mut progress = StreamProgress::default();
        assert!(progress
            .absorb(
                r#"{"error":{"message":"boom"}}"#,
                ms(1),
                Endpoint::Completions
            )
            .is_err());
    }

    #[test]
    fn tpot_spreads_decode_time_over_tokens_after_the_first() {
        let reply = Reply {
            content_offsets: vec![ms(50), ms(70), ms(90)],
            usage_completion_tokens: Some(5),
            text: "abc".into(),
            drafts: None,
        };
        assert_eq!(reply.tpot(), Some(ms(10)));
        let single = Reply {
            content_offsets: vec![ms(50)],
            usage_completion_tokens: Some(1),
            text: "a".into(),
            drafts: None,
        };
        assert_eq!(single.tpot(), None);
    }
}
