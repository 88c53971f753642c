//! Read-only endpoints: `/v1/models`, `/health`, `/version` and `/metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};
use tokenmill_engine::EngineHealth;

use crate::api::api_error::ApiError;
use crate::serving::app_state::AppState;

pub async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.served_model_name,
            "object": "model",
            "created": state.created,
            "owned_by": "tokenmill",
            "root": state.root,
            "parent": null,
            "max_model_len": state.handle.limits().max_model_len,
        }],
    }))
}

/// 200 with an empty body while the engine is serving, as vLLM answers; 503 with the reason
/// from the moment a drain starts (SIGTERM), and once the engine thread has ended or its
/// steps keep failing, so routers and load balancers stop sending traffic here.
pub async fn health(State(state): State<Arc<AppState>>) -> Result<(), ApiError> {
    if state.drain.is_draining() {
        return Err(ApiError::draining());
    }
    match state.handle.health() {
        EngineHealth::Healthy => Ok(()),
        EngineHealth::Failing { consecutive } => Err(ApiError::unavailable(format!(
            "the engine is failing: its last {consecutive} steps failed"
        ))),
        EngineHealth::Stopped => Err(ApiError::unavailable("the engine has stopped")),
    }
}

pub async fn version() -> Json<Value> {
    Json(json!({ "version": env!("CARGO_PKG_VERSION") }))
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let body = state.metrics.render(&state.handle.stats());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}
