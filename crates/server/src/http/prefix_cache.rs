//! `GET /debug/prefix_cache`: the blocks the prefix cache can hand out by content, by the
//! hashes KV-cache events carry, and the event publisher's counters: what a subscriber that
//! applied every event should hold.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::api::api_error::ApiError;
use crate::serving::app_state::AppState;
use crate::serving::off_runtime::off_runtime;

/// `{"block_size", "num_cached_blocks", "block_hashes" (sorted), "kv_events"}`, read between
/// two engine steps; `kv_events` is null unless `--kv-events-config` publishes, else the
/// endpoints, `next_seq` (batches handed over so far) and `dropped_batches`.
pub async fn prefix_cache(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let handle = state.handle.clone();
    let mut hashes = off_runtime(move || Ok(handle.cached_block_hashes()?)).await?;
    hashes.sort_unstable();
    let kv_events = state.kv_events.as_ref().map(|p| {
        json!({
            "endpoint": p.endpoint,
            "replay_endpoint": p.replay_endpoint,
            "next_seq": p.counters.next_seq.load(Ordering::Relaxed),
            "dropped_batches": p.counters.dropped.load(Ordering::Relaxed),
        })
    });
    Ok(Json(json!({
        "block_size": state.handle.limits().block_size,
        "num_cached_blocks": hashes.len(),
        "block_hashes": hashes,
        "kv_events": kv_events,
    })))
}
