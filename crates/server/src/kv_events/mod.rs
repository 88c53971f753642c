//! KV-cache events for routers (`--kv-events-config`): the config, the batches in vLLM's
//! wire format, and the publisher that sends them.

pub mod kv_event_batch;
pub mod kv_event_publisher;
pub mod kv_events_config;
