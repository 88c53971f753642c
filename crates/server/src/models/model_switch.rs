//! The routes in front of several models. A request's JSON body names its `model`; the
//! request goes, unchanged, to that model's own router (loaded first if it is not), so every
//! endpoint of one model (completions, chat, responses, Anthropic's messages) serves each by
//! name. A request without `model` (or without a body) goes to the first model named. The
//! front answers for all models: `/v1/models` (with whether each is loaded), `/health`,
//! `/metrics` (every loaded model's series, by `model_name`, and which are loaded), and
//! llama-server's `POST /models/load` and `/models/unload` with `{"model": NAME}`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper::service::Service;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use serde_json::{json, Value};
use tokenmill_engine::EngineHealth;

use crate::anthropic;
use crate::api::api_error::ApiError;
use crate::models::exposition_merge::merge_expositions;
use crate::models::model_registry::ModelRegistry;
use crate::serving::api_key;
use crate::serving::held_body::HeldBody;

/// What the front needs besides the registry.
#[derive(Clone)]
pub struct Front {
    pub registry: Arc<ModelRegistry>,
    pub api_key: Option<String>,
    /// `--max-request-body-bytes`: the front reads a body whole to find its `model`.
    pub max_body_bytes: usize,
}

pub fn front_router(front: Front) -> Router {
    let keyed = Router::new()
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/models/load", post(load))
        .route("/models/unload", post(unload))
        .route_layer(middleware::from_fn_with_state(
            front.clone(),
            require_api_key,
        ));
    // Anthropic's routes answer the front's own refusals (an unknown model) in its shape too.
    let anthropic = Router::new()
        .route("/v1/messages", post(forward))
        .route("/v1/messages/count_tokens", post(forward))
        .layer(middleware::from_fn(anthropic::errors::reshape_errors));
    Router::new()
        .merge(keyed)
        .merge(anthropic)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(forward)
        .with_state(front)
}

async fn require_api_key(State(front): State<Front>, request: Request, next: Next) -> Response {
    if let Some(key) = &front.api_key {
        if !api_key::sent_key_matches(request.headers(), key) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

async fn models(State(front): State<Front>) -> Json<Value> {
    let data: Vec<Value> = front
        .registry
        .statuses()
        .into_iter()
        .map(|m| {
            json!({
                "id": m.name,
                "object": "model",
                "created": front.registry.created,
                "owned_by": "tokenmill",
                "root": m.source,
                "parent": null,
                "max_model_len": m.max_model_len,
                "loaded": m.state == "loaded",
                // llama-server's router mode reports it so.
                "status": { "value": m.state },
            })
        })
        .collect();
    Json(json!({ "object": "list", "data": data }))
}

#[derive(Deserialize)]
struct ModelField {
    model: Option<Value>,
}

/// `{"model": NAME}` of the load and unload routes.
fn named_model(body: &Bytes) -> Result<String, ApiError> {
    serde_json::from_slice::<ModelField>(body)
        .ok()
        .and_then(|f| f.model)
        .and_then(|m| m.as_str().map(str::to_owned))
        .ok_or_else(|| ApiError::bad_param("model", "send {\"model\": NAME}"))
}

async fn load(State(front): State<Front>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let name = named_model(&body)?;
    front.registry.load(&name).await?;
    Ok(Json(json!({ "success": true })))
}

async fn unload(State(front): State<Front>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let name = named_model(&body)?;
    front.registry.unload(&name).await?;
    Ok(Json(json!({ "success": true })))
}

/// 503 while draining or while a loaded model's engine fails; unloaded models are not
/// asked (they load on demand).
async fn health(State(front): State<Front>) -> Result<(), ApiError> {
    if front.registry.drain.is_draining() {
        return Err(ApiError::draining());
    }
    for resident in front.registry.loaded() {
        match resident.state.handle.health() {
            EngineHealth::Healthy => {}
            EngineHealth::Failing { consecutive } => {
                return Err(ApiError::unavailable(format!(
                    "the engine of {} is failing: its last {consecutive} steps failed",
                    resident.state.served_model_name
                )))
            }
            EngineHealth::Stopped => {
                return Err(ApiError::unavailable(format!(
                    "the engine of {} has stopped",
                    resident.state.served_model_name
                )))
            }
        }
    }
    Ok(())
}

async fn metrics(State(front): State<Front>) -> impl IntoResponse {
    let mut texts: Vec<String> = front
        .registry
        .loaded()
        .iter()
        .map(|r| r.state.metrics.render(&r.state.handle.stats()))
        .collect();
    let mut loaded = String::from(
        "# HELP tokenmill_model_loaded Whether the model is loaded (1) or not (0).\n\
         # TYPE tokenmill_model_loaded gauge\n",
    );
    for status in front.registry.statuses() {
        loaded.push_str(&format!(
            "tokenmill_model_loaded{{model_name=\"{}\"}} {}\n",
            status.name.replace('\\', "\\\\").replace('"', "\\\""),
            u8::from(status.state == "loaded")
        ));
    }
    texts.push(loaded);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        merge_expositions(&texts),
    )
}

/// Sends the request to its model's router, loading the model first if needed.
async fn forward(State(front): State<Front>, request: Request) -> Response {
    let Some(admitted) = front.registry.drain.admit() else {
        return ApiError::draining().into_response();
    };
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, front.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return ApiError::too_large(format!(
                "the request body is over the limit of {} bytes (the server's \
                 --max-request-body-bytes)",
                front.max_body_bytes
            ))
            .into_response()
        }
    };
    let named = (parts.method != Method::GET && !bytes.is_empty())
        .then(|| serde_json::from_slice::<ModelField>(&bytes).ok())
        .flatten()
        .and_then(|f| f.model)
        .and_then(|m| m.as_str().map(str::to_owned));
    let Some(name) = named.or_else(|| front.registry.default_name()) else {
        return ApiError::not_found("this server has no model").into_response();
    };
    let lease = match front.registry.acquire(&name).await {
        Ok(lease) => lease,
        Err(error) => return error.into_response(),
    };
    let router = lease.resident.router.clone();
    let request = Request::from_parts(parts, Body::from(bytes));
    let response = match TowerToHyperService::new(router).call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    // The model stays loaded, and the drain waits, until the reply's body is done.
    Response::from_parts(parts, HeldBody::wrap(body, (lease, admitted)))
}
