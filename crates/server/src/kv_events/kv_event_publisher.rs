//! `KvEventPublisher`: publishes the engine's KV-cache events over ZeroMQ as vLLM does.
//!
//! The engine thread hands each step's events to a sink that stamps them with a sequence
//! number and the time and `try_send`s them into a bounded channel: it never waits. A task
//! on the async runtime encodes each batch (`KvEventBatch`) and sends it on a PUB socket as
//! the multipart message `[topic, sequence (8 bytes big-endian), payload]`, keeping the
//! latest `buffer_steps` payloads. With a `replay_endpoint`, a second task serves a ROUTER
//! socket: a request `[identity, "", start (8 bytes big-endian)]` is answered with
//! `[identity, "", sequence, payload]` for every kept batch from `start` on, then the end
//! marker `[identity, "", -1 (8 bytes big-endian), ""]`, as vLLM's `ZmqEventPublisher`.
//!
//! A batch that finds the channel full is dropped and its sequence number stays unused, so a
//! subscriber sees the gap rather than a silently wrong block set.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bytes::Bytes;
use tokenmill_engine::{KvEvent, KvEventSink};
use tokio::sync::mpsc;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::kv_events::kv_event_batch::KvEventBatch;
use crate::kv_events::kv_events_config::{EventEncoding, KvEventsConfig};

/// The sequence number of the replay's end marker: -1 as a signed 8-byte big-endian integer.
const END_OF_REPLAY: [u8; 8] = (-1i64).to_be_bytes();

/// Counters shared by the sink and whoever reports on the publisher.
#[derive(Debug, Default)]
pub struct KvEventCounters {
    /// The sequence number the next batch gets (so also how many batches were handed over).
    pub next_seq: AtomicU64,
    /// Batches dropped because the queue to the publishing task was full.
    pub dropped: AtomicU64,
}

/// A running publisher: its sockets live on the runtime it was started on.
pub struct KvEventPublisher {
    pub counters: Arc<KvEventCounters>,
    /// Where the PUB socket listens (the bound address, so port 0 reports the port it got)
    /// or the endpoint it connected to.
    pub endpoint: String,
    /// Where the replay socket listens, if there is one.
    pub replay_endpoint: Option<String>,
}

/// One step's events on their way to the publishing task.
struct Outgoing {
    seq: u64,
    ts: f64,
    events: Vec<KvEvent>,
}

/// The latest published payloads, by sequence number, for replay.
type ReplayBuffer = Arc<Mutex<VecDeque<(u64, Bytes)>>>;

impl KvEventPublisher {
    /// Binds (or connects) the sockets and starts the publishing tasks on the current tokio
    /// runtime; returns the publisher and the sink to give the engine.
    pub async fn start(config: &KvEventsConfig) -> anyhow::Result<(Self, KvEventSink)> {
        let mut publisher = PubSocket::new();
        let endpoint = if binds(&config.endpoint) {
            let bound = publisher
                .bind(&bindable(&config.endpoint))
                .await
                .with_context(|| format!("--kv-events-config: cannot bind {}", config.endpoint))?;
            bound.to_string()
        } else {
            publisher.connect(&config.endpoint).await.with_context(|| {
                format!("--kv-events-config: cannot connect to {}", config.endpoint)
            })?;
            config.endpoint.clone()
        };
        let buffer: ReplayBuffer = Arc::default();
        let replay_endpoint = match &config.replay_endpoint {
            Some(replay) => {
                let mut router = RouterSocket::new();
                let bound = router.bind(&bindable(replay)).await.with_context(|| {
                    format!("--kv-events-config: cannot bind replay_endpoint {replay}")
                })?;
                tokio::spawn(serve_replays(router, buffer.clone()));
                Some(bound.to_string())
            }
            None => None,
        };
        let (tx, rx) = mpsc::channel(config.max_queue_size);
        tokio::spawn(publish(
            publisher,
            rx,
            Bytes::from(config.topic.clone().into_bytes()),
            buffer,
            config.buffer_steps,
            config.event_encoding,
        ));
        let counters = Arc::new(KvEventCounters::default());
        let sink = sink(tx, counters.clone());
        tracing::info!(
            "KV-cache events: publishing on {endpoint}{}",
            replay_endpoint
                .as_deref()
                .map(|r| format!(", replay on {r}"))
                .unwrap_or_default()
        );
        Ok((
            Self {
                counters,
                endpoint,
                replay_endpoint,
            },
            sink,
        ))
    }
}

/// vLLM's rule: bind an endpoint with a wildcard host, connect to any other.
fn binds(endpoint: &str) -> bool {
    endpoint.contains('*') || endpoint.contains("::")
}

/// The `zeromq` crate resolves the host as written, so the wildcard `*` is spelled 0.0.0.0.
fn bindable(endpoint: &str) -> String {
    endpoint.replace("://*:", "://0.0.0.0:")
}

/// The engine's side: stamp, number, and hand over without waiting.
fn sink(tx: mpsc::Sender<Outgoing>, counters: Arc<KvEventCounters>) -> KvEventSink {
    Box::new(move |events| {
        let seq = counters.next_seq.fetch_add(1, Ordering::Relaxed);
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        if tx.try_send(Outgoing { seq, ts, events }).is_err() {
            let dropped = counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // The first drop, then at each power of two: a stuck publisher logs, not floods.
            if dropped.is_power_of_two() {
                tracing::warn!(
                    "KV-cache events: the publishing queue is full; {dropped} batches dropped so far \
                     (subscribers see gaps in the sequence numbers)"
                );
            }
        }
    })
}

async fn publish(
    mut socket: PubSocket,
    mut batches: mpsc::Receiver<Outgoing>,
    topic: Bytes,
    buffer: ReplayBuffer,
    buffer_steps: usize,
    encoding: EventEncoding,
) {
    while let Some(Outgoing { seq, ts, events }) = batches.recv().await {
        let batch = KvEventBatch {
            ts,
            events,
            data_parallel_rank: Some(0),
        };
        let payload = match batch.encode_as(encoding) {
            Ok(payload) => Bytes::from(payload),
            Err(error) => {
                tracing::error!("KV-cache events: batch {seq} could not be encoded: {error}");
                continue;
            }
        };
        let frames = vec![
            topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload.clone(),
        ];
        match ZmqMessage::try_from(frames) {
            Ok(message) => {
                if let Err(error) = socket.send(message).await {
                    tracing::warn!("KV-cache events: batch {seq} not sent: {error}");
                }
            }
            Err(error) => tracing::error!("KV-cache events: batch {seq}: {error}"),
        }
        if buffer_steps > 0 {
            if let Ok(mut kept) = buffer.lock() {
                if kept.len() == buffer_steps {
                    kept.pop_front();
                }
                kept.push_back((seq, payload));
            }
        }
    }
}

async fn serve_replays(mut socket: RouterSocket, buffer: ReplayBuffer) {
    loop {
        let request = match socket.recv().await {
            Ok(request) => request.into_vec(),
            Err(error) => {
                tracing::warn!("KV-cache events: replay socket closed: {error}");
                return;
            }
        };
        let start = match request.as_slice() {
            [_, empty, start] if empty.is_empty() => <[u8; 8]>::try_from(start.as_ref()).ok(),
            _ => None,
        };
        let Some(start) = start.map(u64::from_be_bytes) else {
            tracing::warn!(
                "KV-cache events: ignored a replay request of {} frames; expected \
                 [\"\", start sequence as 8 bytes big-endian] from a REQ or DEALER",
                request.len().saturating_sub(1)
            );
            continue;
        };
        let identity = request[0].clone();
        let kept: Vec<(u64, Bytes)> = match buffer.lock() {
            Ok(kept) => kept.iter().filter(|(s, _)| *s >= start).cloned().collect(),
            Err(_) => Vec::new(),
        };
        let replies = kept
            .into_iter()
            .map(|(seq, payload)| (Bytes::copy_from_slice(&seq.to_be_bytes()), payload))
            .chain(std::iter::once((
                Bytes::from_static(&END_OF_REPLAY),
                Bytes::new(),
            )));
        for (seq, payload) in replies {
            let frames = vec![identity.clone(), Bytes::new(), seq, payload];
            let sent = match ZmqMessage::try_from(frames) {
                Ok(message) => socket.send(message).await.map_err(|e| e.to_string()),
                Err(error) => Err(error.to_string()),
            };
            if let Err(error) = sent {
                tracing::warn!("KV-cache events: replay cut short: {error}");
                break;
            }
        }
    }
}
