//! `KvEventsConfig`: the `--kv-events-config` JSON object, spelled as vLLM's flag of the same
//! name (`enable_kv_cache_events`, `publisher`, `endpoint`, `replay_endpoint`,
//! `buffer_steps`, `hwm`, `max_queue_size`, `topic`), checked once at startup.

use serde::Deserialize;

/// Each subscriber's send queue in the `zeromq` crate, in batches: fixed by the crate (it
/// has no high-water-mark option), and the same as vLLM's default `hwm`.
pub const ZEROMQ_SUBSCRIBER_QUEUE: usize = 100_000;

/// How KV-cache events are published (see docs/scale-out.md, "KV-cache events").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KvEventsConfig {
    /// Off by default, as in vLLM: the rest of the object is then checked but unused.
    pub enable_kv_cache_events: bool,
    /// `"zmq"` or `"null"` (events computed nowhere); default `"zmq"` when events are
    /// enabled, else `"null"`, as vLLM fills it in.
    pub publisher: Option<String>,
    /// The PUB socket, `tcp://HOST:PORT`: bound when the host is a wildcard (`*`, `::`), as
    /// in `tcp://*:5557`, connected to otherwise (vLLM's rule).
    pub endpoint: String,
    /// A ROUTER socket (always bound) that answers a replay request: the start sequence
    /// number as 8 bytes big-endian, answered with every buffered batch from there and an
    /// end marker.
    pub replay_endpoint: Option<String>,
    /// How many of the latest batches the replay socket keeps.
    pub buffer_steps: usize,
    /// The PUB socket's high-water mark; only [`ZEROMQ_SUBSCRIBER_QUEUE`] can be honoured.
    pub hwm: usize,
    /// Batches waiting to be published at most; beyond it a step's batch is dropped (the
    /// engine never waits) and its sequence number is skipped, so subscribers see the gap.
    pub max_queue_size: usize,
    /// The first frame of every message, what subscribers filter on.
    pub topic: String,
    /// tokenmill's own key: how each event is written. `"array"` (the default) is vLLM's
    /// msgspec `array_like` form; `"map"` writes each event as a map tagged by `"type"`
    /// (with `lora_name`), the only form vllm-router 0.1.17's `kv_aware` policy decodes.
    pub event_encoding: EventEncoding,
}

/// How each event of a batch is written (see [`KvEventsConfig::event_encoding`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventEncoding {
    /// `["BlockStored", block_hashes, ...]`: vLLM's msgspec `array_like`, `tag` form.
    #[default]
    Array,
    /// `{"type": "BlockStored", "block_hashes": ..., "lora_name": nil, ...}`.
    Map,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            enable_kv_cache_events: false,
            publisher: None,
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: None,
            buffer_steps: 10_000,
            hwm: ZEROMQ_SUBSCRIBER_QUEUE,
            max_queue_size: 100_000,
            topic: String::new(),
            event_encoding: EventEncoding::Array,
        }
    }
}

impl KvEventsConfig {
    /// Parses and checks the flag's JSON; the error names what is wrong.
    pub fn parse(json: &str) -> Result<Self, String> {
        let mut config: Self = serde_json::from_str(json).map_err(|e| format!("{e}"))?;
        let publisher = config
            .publisher
            .get_or_insert_with(|| {
                if config.enable_kv_cache_events {
                    "zmq".into()
                } else {
                    "null".into()
                }
            })
            .clone();
        if publisher != "zmq" && publisher != "null" {
            return Err(format!(
                "unknown publisher {publisher:?}: tokenmill publishes with \"zmq\" (or \"null\" for none)"
            ));
        }
        check_endpoint("endpoint", &config.endpoint)?;
        if let Some(replay) = &config.replay_endpoint {
            check_endpoint("replay_endpoint", replay)?;
        }
        if config.hwm != ZEROMQ_SUBSCRIBER_QUEUE {
            return Err(format!(
                "hwm {}: the zeromq crate fixes each subscriber's queue at {ZEROMQ_SUBSCRIBER_QUEUE} \
                 batches (vLLM's default), so no other value can be honoured",
                config.hwm
            ));
        }
        if config.max_queue_size == 0 {
            return Err("max_queue_size must be at least 1".into());
        }
        Ok(config)
    }

    /// Whether events are recorded and published (enabled, with the `zmq` publisher).
    pub fn publishes(&self) -> bool {
        self.enable_kv_cache_events && self.publisher.as_deref() == Some("zmq")
    }
}

/// `tcp://HOST:PORT`: the transport tokenmill's `zeromq` build has (vLLM's `ipc://` and
/// `inproc://` are refused by name).
fn check_endpoint(field: &str, endpoint: &str) -> Result<(), String> {
    let ok = endpoint.strip_prefix("tcp://").is_some_and(|addr| {
        addr.rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{field} {endpoint:?}: expected tcp://HOST:PORT (HOST may be * to listen on every \
             address); only the tcp transport is supported"
        ))
    }
}
