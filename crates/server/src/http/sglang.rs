//! SGLang's native info and load endpoints, as SGLang's router (`sglang-router`) reads them
//! when it registers a worker and balances by load: `/server_info` and `/model_info` (and
//! their older spellings `/get_server_info`, `/get_model_info`), `/get_load`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::serving::app_state::AppState;

/// The served name (the router's model id: it routes requests naming it here), the model's
/// path, and the engine's capacity under SGLang's names.
pub async fn server_info(State(state): State<Arc<AppState>>) -> Json<Value> {
    let c = &state.config;
    Json(json!({
        "model_path": c.model_path,
        "tokenizer_path": c.model_path,
        "served_model_name": state.served_model_name,
        "version": env!("CARGO_PKG_VERSION"),
        "engine": "tokenmill",
        "dp_size": 1,
        "tp_size": 1,
        "context_length": c.max_model_len,
        "max_total_num_tokens": c.kv_tokens(),
        "max_running_requests": c.max_num_seqs,
        "max_prefill_tokens": c.max_num_batched_tokens,
        "chunked_prefill_size": c.max_num_batched_tokens,
        "page_size": c.block_size,
        "kv_cache_dtype": c.kv_cache_dtype,
        "disable_radix_cache": !c.enable_prefix_caching,
        "is_embedding": false,
    }))
}

pub async fn model_info(State(state): State<Arc<AppState>>) -> Json<Value> {
    let c = &state.config;
    Json(json!({
        "model_path": c.model_path,
        "tokenizer_path": c.model_path,
        "served_model_name": state.served_model_name,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": "default",
        "has_image_understanding": false,
        "has_audio_understanding": false,
    }))
}

/// One entry per data-parallel rank (tokenmill has one): requests running and waiting, and
/// the KV tokens held, which the router's power-of-two policy compares.
pub async fn load(State(state): State<Arc<AppState>>) -> Json<Value> {
    let stats = state.handle.stats();
    let used_tokens = (stats.kv_cache_usage * state.config.kv_tokens() as f64).round() as u64;
    Json(json!([{
        "dp_rank": 0,
        "num_reqs": stats.num_running + stats.num_waiting,
        "num_waiting_reqs": stats.num_waiting,
        "num_tokens": used_tokens,
    }]))
}
