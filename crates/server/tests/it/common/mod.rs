//! Shared by the HTTP tests: the real default model served in-process on 127.0.0.1, an offline
//! engine that computes what the server should answer, and a small SSE-reading client.
#![allow(dead_code)]

// The default model's path and the golden reference, found as the engine's tests find them.
#[path = "../../../../engine/tests/it/common/reference.rs"]
pub mod reference;
// Whether a model test runs, skips or fails, as the engine's tests decide it.
#[path = "../../../../engine/tests/it/common/model.rs"]
pub mod model;
pub mod python_client;
pub mod schema_check;

pub(crate) use model::skip_without_model;

use std::sync::{Arc, Mutex, OnceLock};

use clap::Parser;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokenmill_engine::{Engine, EngineArgs, Request, SamplingParams};
use tokenmill_server::http::api_server::{spawn_server, ServerHandle, ServerOptions};
use tokenmill_server::model::model_loader::{self, LoadedModel};
use tokenmill_server::text::chat_template::{ChatMessage, ChatTemplate};
use tokenmill_server::text::tokenizer::Tokenizer;

/// A pool of 512 blocks of 16 tokens keeps each engine small; prompts and outputs here are short.
const TEST_ENGINE_FLAGS: [&str; 2] = ["--num-kv-blocks", "512"];

#[derive(Parser)]
struct EngineCli {
    #[command(flatten)]
    engine: EngineArgs,
}

pub fn load_model(extra_flags: &[&str]) -> LoadedModel {
    // A missing model fails here, with the command that fetches it.
    model::path();
    let args = std::iter::once("test")
        .chain(TEST_ENGINE_FLAGS)
        .chain(extra_flags.iter().copied());
    model_loader::load(&EngineCli::parse_from(args).engine).expect("loading the default model")
}

pub fn start_server(extra_flags: &[&str], options: ServerOptions) -> ServerHandle {
    spawn_server(
        load_model(extra_flags),
        options,
        "127.0.0.1:0".parse().unwrap(),
    )
    .expect("starting the server")
}

/// A server whose KV pool `flags` size (say by `--kv-cache-memory-gib`), without the fixed
/// block count the other tests' servers take.
pub fn start_server_sized_by(flags: &[&str]) -> ServerHandle {
    model::path();
    let args = std::iter::once("test").chain(flags.iter().copied());
    let loaded =
        model_loader::load(&EngineCli::parse_from(args).engine).expect("loading the default model");
    spawn_server(
        loaded,
        ServerOptions::default(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .expect("starting the server")
}

/// One server per test binary, shared by its tests.
pub fn server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| start_server(&[], ServerOptions::default()))
}

pub fn url(path: &str) -> String {
    format!("{}{path}", server().base_url())
}

/// What the server should produce, computed offline through `Engine::generate`, one request alone.
pub struct Reference {
    engine: Mutex<Engine>,
    pub tokenizer: Arc<Tokenizer>,
    template: ChatTemplate,
}

#[derive(Debug, Clone)]
pub struct Expected {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub prompt_tokens: usize,
    pub finish_reason: &'static str,
}

pub fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let model = load_model(&[]);
        Reference {
            engine: Mutex::new(model.engine),
            tokenizer: model.tokenizer.expect("the default model has a tokenizer"),
            template: model
                .chat_template
                .expect("the default model has a chat template"),
        }
    })
}

impl Reference {
    /// Completions tokenize the prompt with special tokens, as `tokenmill generate` does.
    pub fn completion(&self, prompt: &str, params: SamplingParams) -> Expected {
        let ids = self.tokenizer.encode(prompt, true).unwrap();
        self.run(ids, params)
    }

    /// Chat renders one user turn with the generation prompt; the template adds any BOS.
    pub fn chat(&self, user: &str, params: SamplingParams) -> Expected {
        let text = self
            .template
            .render(&[ChatMessage::new("user", user)], true)
            .unwrap();
        let ids = self.tokenizer.encode(&text, false).unwrap();
        self.run(ids, params)
    }

    pub fn chat_prompt_ids(&self, user: &str) -> Vec<u32> {
        let text = self
            .template
            .render(&[ChatMessage::new("user", user)], true)
            .unwrap();
        self.tokenizer.encode(&text, false).unwrap()
    }

    /// The default model's chat template applied to `messages`.
    pub fn template_render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Option<String> {
        self.template.render(messages, add_generation_prompt).ok()
    }

    /// The embedding the server should answer for `prompt` (its default pooling: the last
    /// token's state, normalized), computed alone.
    pub fn embed(&self, prompt: Vec<u32>) -> Vec<f32> {
        let request = tokenmill_engine::EmbedRequest {
            prompt,
            pooling: tokenmill_engine::PoolerConfig::default(),
            priority: 0,
        };
        let mut engine = self.engine.lock().unwrap();
        engine.embed(vec![request]).unwrap().remove(0)
    }

    /// The reply to a prompt given as token ids.
    pub fn run_ids(&self, prompt: Vec<u32>, params: SamplingParams) -> Expected {
        self.run(prompt, params)
    }

    fn run(&self, prompt: Vec<u32>, params: SamplingParams) -> Expected {
        let prompt_tokens = prompt.len();
        let done = self
            .engine
            .lock()
            .unwrap()
            .generate(vec![Request {
                prompt,
                params,
                priority: 0,
                constraint: None,
            }])
            .unwrap()
            .remove(0);
        let token_ids = done.token_ids();
        Expected {
            text: self.tokenizer.decode(&token_ids, true).unwrap(),
            token_ids,
            prompt_tokens,
            finish_reason: done.finish_reason.as_str(),
        }
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

pub async fn post_json(path: &str, body: Value) -> (StatusCode, Value) {
    post_json_to(&server().base_url(), path, body).await
}

/// [`post_json`] to the server at `base` (its URL, no trailing slash).
pub async fn post_json_to(base: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let response = client()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path} answered non-JSON ({e}): {text:.300}"));
    (status, value)
}

pub async fn get_text(path: &str) -> (StatusCode, String) {
    let response = client().get(url(path)).send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

/// Splits SSE bytes into `data:` payloads.
#[derive(Default)]
pub struct SseReader {
    buffer: String,
}

impl SseReader {
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer
            .push_str(std::str::from_utf8(bytes).expect("SSE is UTF-8"));
        let mut payloads = Vec::new();
        while let Some(end) = self.buffer.find("\n\n") {
            let event: String = self.buffer.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    payloads.push(data.trim_start().to_owned());
                }
            }
        }
        payloads
    }
}

/// Posts a streaming request and returns every chunk before `[DONE]` (which must arrive).
pub async fn post_stream(path: &str, body: Value) -> Vec<Value> {
    post_stream_to(server(), path, body).await
}

/// [`post_stream`] to a given server.
pub async fn post_stream_to(server: &ServerHandle, path: &str, body: Value) -> Vec<Value> {
    let url = format!("{}{path}", server.base_url());
    let response = client().post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path} {body}");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    read_stream(response).await
}

/// Every chunk of a streaming reply (a server's or a router's) before `[DONE]`, which must
/// arrive.
pub async fn read_stream(mut response: reqwest::Response) -> Vec<Value> {
    let mut reader = SseReader::default();
    let mut chunks = Vec::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        for payload in reader.feed(&bytes) {
            if payload == "[DONE]" {
                return chunks;
            }
            chunks.push(serde_json::from_str(&payload).unwrap());
        }
    }
    panic!("{}: the stream ended without [DONE]", response.url());
}

/// Reads a streaming reply until at least `n` `data:` payloads have come (the stream must
/// not end first), returning them; `reader` keeps any partial event for the rest.
pub async fn first_payloads(
    response: &mut reqwest::Response,
    reader: &mut SseReader,
    n: usize,
) -> Vec<String> {
    let mut payloads = Vec::new();
    while payloads.len() < n {
        let bytes = response
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended early");
        payloads.extend(reader.feed(&bytes));
    }
    payloads
}

/// The Prometheus exposition of the server at `base` (its URL, no trailing slash).
pub async fn metrics_text(base: &str) -> String {
    client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Concatenated text of one choice across stream chunks (completions `text`, chat `delta.content`).
pub fn streamed_text(chunks: &[Value], index: usize) -> String {
    chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .filter(|choice| choice["index"] == index)
        .map(|choice| {
            choice["text"]
                .as_str()
                .or_else(|| choice["delta"]["content"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

pub fn streamed_finish_reason(chunks: &[Value], index: usize) -> Option<String> {
    chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .filter(|choice| choice["index"] == index)
        .find_map(|choice| choice["finish_reason"].as_str().map(str::to_owned))
}

pub fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams::greedy(max_tokens)
}

pub fn metric(exposition: &str, series: &str) -> f64 {
    tokenmill_server::metrics::sample_value(exposition, series)
        .unwrap_or_else(|| panic!("/metrics has no {series}"))
}

/// A one-message chat request with `extra`'s fields added (or replacing the defaults).
pub fn chat_body(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let fields = extra
        .as_object()
        .expect("extra fields are an object")
        .clone();
    body.as_object_mut().unwrap().extend(fields);
    body
}
