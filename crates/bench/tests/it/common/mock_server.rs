//! A scripted OpenAI-compatible streaming server on 127.0.0.1 for tests and client-cost checks.
//!
//! The prompt is the script: words `ttft=MS itl=MS n=CHUNKS usage=TOKENS status=CODE hang=S
//! empty` set what the reply does. Its tokenizer is one token per word, and ids divisible
//! by 5 detokenize to nothing, so re-tokenized random text can come out shorter.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use serde_json::{json, Value};

#[derive(Default)]
pub struct MockOptions {
    /// Whether `/tokenize` and `/detokenize` exist.
    pub tokenizer: bool,
    /// `/health` answers 503 until this file exists, like a server still loading its model.
    pub healthy_once_exists: Option<std::path::PathBuf>,
    /// A file holding a whole number that multiplies every scripted delay, read per request:
    /// commands that write different numbers make one mock play several servers in turn.
    pub slowdown_file: Option<std::path::PathBuf>,
    /// Server-wide timing replacing the prompts' `ttft` and `itl`, for a mock that plays a
    /// server whose flags set its speed.
    pub pacing: Option<Pacing>,
    /// Added to the TTFT per prompt token, as a prefill would take, so long prompts answer
    /// later than short ones.
    pub prefill_per_token: Duration,
    /// A speculating server's `/metrics`: each reply adds `SPEC_PER_REPLY` to vLLM's
    /// `spec_decode` counters.
    pub spec_metrics: bool,
    /// Each reply's last chunk carries llama-server's `timings` draft counts of
    /// `SPEC_PER_REPLY`.
    pub spec_timings: bool,
}

/// What one reply of a speculating mock adds: (drafts, draft tokens, accepted tokens,
/// accepted at positions 0 and 1).
pub const SPEC_PER_REPLY: (u64, u64, u64, [u64; 2]) = (2, 8, 5, [2, 1]);

/// How a paced mock streams every reply.
#[derive(Clone, Debug)]
pub struct Pacing {
    pub ttft: Duration,
    /// The gaps before the second, third, … chunk, repeated for longer replies.
    pub gaps: Vec<Duration>,
    /// Replies streamed at once; later ones wait for a free slot, as requests beyond a
    /// server's running-sequence limit wait, and their clock starts when one frees.
    pub slots: usize,
}

pub struct MockServer {
    pub base_url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl MockServer {
    /// Starts the server on its own threads, each serving one connection at a time: blocking
    /// sleeps wake within tens of microseconds, where an async timer rounds up to the next
    /// millisecond.
    pub fn start(options: MockOptions) -> MockServer {
        Self::start_on("127.0.0.1:0", options)
    }

    /// The mock most tests want: with `/tokenize`, healthy at once, at the scripted speed.
    pub fn with_tokenizer() -> MockServer {
        Self::start(MockOptions {
            tokenizer: true,
            ..Default::default()
        })
    }

    pub fn start_on(address: &str, options: MockOptions) -> MockServer {
        let listener = StdListener::bind(address).expect("bind the mock server");
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(State {
            tokenizer: options.tokenizer,
            healthy_once_exists: options.healthy_once_exists,
            slowdown_file: options.slowdown_file,
            slots: options.pacing.as_ref().map(|p| Slots::new(p.slots)),
            pacing: options.pacing,
            prefill_per_token: options.prefill_per_token,
            bodies: bodies.clone(),
            spec_metrics: options.spec_metrics,
            spec_timings: options.spec_timings,
            replies: Mutex::new(0),
        });
        // Every worker waits in accept before the first request, so none arrives to an empty house.
        let ready = Arc::new(std::sync::Barrier::new(WORKERS + 1));
        for _ in 0..WORKERS {
            let (listener, state, ready) =
                (listener.try_clone().unwrap(), state.clone(), ready.clone());
            std::thread::spawn(move || {
                ready.wait();
                accept_loop(listener, state)
            });
        }
        ready.wait();
        MockServer { base_url, bodies }
    }

    /// Bodies of the generation requests received since the last call.
    pub fn take_generation_bodies(&self) -> Vec<Value> {
        std::mem::take(&mut *self.bodies.lock().unwrap())
    }
}

struct State {
    tokenizer: bool,
    healthy_once_exists: Option<std::path::PathBuf>,
    slowdown_file: Option<std::path::PathBuf>,
    pacing: Option<Pacing>,
    slots: Option<Slots>,
    prefill_per_token: Duration,
    bodies: Arc<Mutex<Vec<Value>>>,
    spec_metrics: bool,
    spec_timings: bool,
    /// Replies streamed to their end.
    replies: Mutex<u64>,
}

impl State {
    /// vLLM's spec_decode counters after `replies` replies, with a second model's series that
    /// never moves (the client sums series) and a `_created` sample it must not read.
    fn spec_metrics(&self) -> String {
        let n = *self.replies.lock().unwrap();
        let (drafts, tokens, accepted, per_pos) = SPEC_PER_REPLY;
        let mut text = String::from("# TYPE vllm:spec_decode_num_drafts counter\n");
        text += &format!(
            "vllm:spec_decode_num_drafts_total{{model_name=\"mock-model\"}} {}\n",
            n * drafts
        );
        text += "vllm:spec_decode_num_drafts_total{model_name=\"other\"} 7\n";
        text += "vllm:spec_decode_num_drafts_created{model_name=\"mock-model\"} 1700000000.0\n";
        text += &format!(
            "vllm:spec_decode_num_draft_tokens_total{{model_name=\"mock-model\"}} {}\n",
            n * tokens
        );
        text += &format!(
            "vllm:spec_decode_num_accepted_tokens_total{{model_name=\"mock-model\"}} {}\n",
            n * accepted
        );
        for (position, per) in per_pos.iter().enumerate() {
            text += &format!(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name=\"mock-model\",position=\"{position}\"}} {}\n",
                n * per
            );
        }
        text
    }
}

/// A counting semaphore over the paced mock's reply slots.
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    fn new(count: usize) -> Self {
        Slots {
            free: Mutex::new(count.max(1)),
            freed: Condvar::new(),
        }
    }

    fn acquire(&self) -> SlotGuard<'_> {
        let mut free = self.free.lock().unwrap();
        while *free == 0 {
            free = self.freed.wait(free).unwrap();
        }
        *free -= 1;
        SlotGuard(self)
    }
}

struct SlotGuard<'a>(&'a Slots);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap() += 1;
        self.0.freed.notify_one();
    }
}

impl State {
    /// The factor in `slowdown_file`, 1 without one.
    fn slowdown(&self) -> u32 {
        self.slowdown_file
            .as_ref()
            .and_then(|file| std::fs::read_to_string(file).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(1)
    }
}

/// Connections served at once. Threads wait in `accept` beforehand, because spawning one per
/// connection delays a burst of fifty requests by milliseconds on a busy machine.
const WORKERS: usize = 96;

fn accept_loop(listener: StdListener, state: Arc<State>) {
    for stream in listener.incoming().flatten() {
        let _ = handle(stream, state.clone());
    }
}

/// Serves requests on one kept-alive connection until the client closes it.
fn handle(mut stream: TcpStream, state: Arc<State>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    while let Some((method, path, body)) = read_request(&mut stream)? {
        answer(&mut stream, &state, &method, &path, &body)?;
    }
    Ok(())
}

fn answer(
    stream: &mut TcpStream,
    state: &State,
    method: &str,
    path: &str,
    body: &Value,
) -> std::io::Result<()> {
    let stream = &mut *stream;
    let received = Instant::now();
    match (method, path) {
        ("GET", "/health") => {
            let ready = state
                .healthy_once_exists
                .as_ref()
                .is_none_or(|file| file.exists());
            respond_json(stream, if ready { 200 } else { 503 }, &json!({}))
        }
        ("GET", "/metrics") if state.spec_metrics => {
            let text = state.spec_metrics();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                text.len()
            );
            stream.write_all(head.as_bytes())?;
            stream.write_all(text.as_bytes())
        }
        ("GET", "/v1/models") => {
            respond_json(stream, 200, &json!({"data": [{"id": "mock-model"}]}))
        }
        ("POST", "/tokenize") if state.tokenizer => {
            let tokens = tokenize(body["prompt"].as_str().unwrap_or(""));
            respond_json(
                stream,
                200,
                &json!({"count": tokens.len(), "tokens": tokens, "max_model_len": 100000}),
            )
        }
        ("POST", "/detokenize") if state.tokenizer => {
            let ids: Vec<u32> = serde_json::from_value(body["tokens"].clone()).unwrap_or_default();
            respond_json(stream, 200, &json!({"prompt": detokenize(&ids)}))
        }
        ("POST", "/v1/completions") | ("POST", "/v1/chat/completions") => {
            state.bodies.lock().unwrap().push(body.clone());
            let _slot = state.slots.as_ref().map(Slots::acquire);
            let mut script = script(body);
            if let Some(pacing) = &state.pacing {
                script.ttft = pacing.ttft;
                script.gaps = pacing.gaps.clone();
            }
            script.ttft += state.prefill_per_token * prompt_tokens(body) as u32;
            let received = if state.slots.is_some() {
                Instant::now()
            } else {
                received
            };
            stream_reply(stream, script, body, path.contains("chat"), received, state)
        }
        _ => respond_json(stream, 404, &json!({"error": "not found"})),
    }
}

fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<(String, String, Value)>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
    let mut words = head.split_whitespace();
    let (method, path) = (
        words.next().unwrap_or("").to_owned(),
        words.next().unwrap_or("").to_owned(),
    );
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = serde_json::from_slice(&buffer[header_end..]).unwrap_or(Value::Null);
    Ok(Some((method, path, body)))
}

fn respond_json(stream: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let text = body.to_string();
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        text.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(text.as_bytes())
}

/// The reply a prompt asks for.
struct Script {
    ttft: Duration,
    itl: Duration,
    /// When not empty, the gaps between chunks (repeated) in place of `itl`.
    gaps: Vec<Duration>,
    chunks: usize,
    usage_tokens: usize,
    status: u16,
    hang: Option<Duration>,
    empty: bool,
}

fn script(body: &Value) -> Script {
    let prompt = match (&body["prompt"], &body["messages"][0]["content"]) {
        (Value::String(text), _) | (_, Value::String(text)) => text.clone(),
        _ => String::new(),
    };
    let keys: HashMap<&str, &str> = prompt
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let number = |key: &str| keys.get(key).and_then(|v| v.parse::<u64>().ok());
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16) as usize;
    let chunks = number("n").map_or(max_tokens, |n| n as usize);
    Script {
        ttft: Duration::from_millis(number("ttft").unwrap_or(5)),
        itl: Duration::from_millis(number("itl").unwrap_or(2)),
        gaps: Vec::new(),
        chunks,
        usage_tokens: number("usage").map_or(chunks, |n| n as usize),
        status: number("status").map_or(200, |s| s as u16),
        hang: number("hang").map(Duration::from_secs),
        empty: prompt.split_whitespace().any(|w| w == "empty"),
    }
}

fn prompt_tokens(body: &Value) -> usize {
    match (&body["prompt"], &body["messages"][0]["content"]) {
        (Value::Array(ids), _) => ids.len(),
        (Value::String(text), _) | (_, Value::String(text)) => tokenize(text).len(),
        _ => 0,
    }
}

impl Script {
    /// When chunk `index` is due, counted from the request's arrival.
    fn offset(&self, index: usize) -> Duration {
        if self.gaps.is_empty() {
            return self.ttft + self.itl * index as u32;
        }
        self.ttft + self.gaps.iter().cycle().take(index).sum::<Duration>()
    }
}

fn stream_reply(
    stream: &mut TcpStream,
    mut script: Script,
    body: &Value,
    chat: bool,
    received: Instant,
    state: &State,
) -> std::io::Result<()> {
    let slowdown = state.slowdown();
    script.ttft *= slowdown;
    script.itl *= slowdown;
    for gap in &mut script.gaps {
        *gap *= slowdown;
    }
    if script.status != 200 {
        return respond_json(
            stream,
            script.status,
            &json!({"error": {"message": "scripted failure"}}),
        );
    }
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes())?;
    if let Some(hang) = script.hang {
        std::thread::sleep(hang);
    }
    if chat {
        send_event(
            stream,
            &json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        )?;
    }
    let chunks = if script.empty { 0 } else { script.chunks };
    for index in 0..chunks {
        // Deadlines from the request's arrival, so sleep overshoot does not accumulate.
        sleep_until(received + script.offset(index));
        let choice = if chat {
            json!({"index": 0, "delta": {"content": "tok "}})
        } else {
            json!({"index": 0, "text": "tok "})
        };
        send_event(stream, &json!({"choices": [choice]}))?;
    }
    let prompt = prompt_tokens(body);
    let usage = json!({"prompt_tokens": prompt, "completion_tokens": script.usage_tokens,
                       "total_tokens": prompt + script.usage_tokens});
    let mut last = json!({"choices": [], "usage": usage});
    // Counted before the reply ends, as a server counts drafts while it decodes.
    *state.replies.lock().unwrap() += 1;
    if state.spec_timings {
        let (_, tokens, accepted, _) = SPEC_PER_REPLY;
        last["timings"] = json!({"predicted_n": script.usage_tokens, "draft_n": tokens,
                                 "draft_n_accepted": accepted});
    }
    send_event(stream, &last)?;
    write_chunk(stream, b"data: [DONE]\n\n")?;
    write_chunk(stream, b"")
}

fn sleep_until(deadline: Instant) {
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
}

fn send_event(stream: &mut TcpStream, event: &Value) -> std::io::Result<()> {
    write_chunk(stream, format!("data: {event}\n\n").as_bytes())
}

/// One piece of a chunked body; the empty piece ends the body and frees the connection.
fn write_chunk(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut frame = format!("{:x}\r\n", bytes.len()).into_bytes();
    frame.extend_from_slice(bytes);
    frame.extend_from_slice(b"\r\n");
    stream.write_all(&frame)
}

/// One token per word: `t17` is id 17; any other word gets an id from its bytes.
pub fn tokenize(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .map(|word| {
            word.strip_prefix('t')
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| {
                    word.bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
                        % 5000
                        + 1
                })
        })
        .collect()
}

/// Ids divisible by 5 vanish, like special tokens dropped on decoding.
pub fn detokenize(ids: &[u32]) -> String {
    ids.iter()
        .filter(|id| *id % 5 != 0)
        .map(|id| format!("t{id}"))
        .collect::<Vec<_>>()
        .join(" ")
}
