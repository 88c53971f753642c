//! The HTTP routes and the layers around them (API key, body limit, OpenAI-shaped 404/405).
//!
//! A client that sends `Expect: 100-continue` with a Content-Length over the body limit is
//! refused before the handler runs: hyper answers `100 Continue` only when a handler starts
//! reading the body, so the client never sends it.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};

use super::{info, prefix_cache, sglang, tokenize};
use crate::anthropic;
use crate::api::api_error::{ApiError, Refusal};
use crate::openai::responses::handlers as responses;
use crate::openai::responses::store::ResponseStore;
use crate::openai::{chat_completions, completions, embeddings};
use crate::serving::api_key;
use crate::serving::app_state::AppState;
use crate::serving::held_body::HeldBody;

pub fn router(state: Arc<AppState>) -> Router {
    // Generation counts towards a drain: refused once it starts, waited for until it ends.
    let generation = Router::new()
        .route("/completions", post(completions::completions))
        .route(
            "/chat/completions",
            post(chat_completions::chat_completions),
        )
        .route("/responses", post(responses::create))
        .route("/embeddings", post(embeddings::embeddings))
        .route_layer(middleware::from_fn_with_state(state.clone(), admit));
    // Responses kept for `previous_response_id` and `GET /v1/responses/{id}`.
    let stored = Arc::new(ResponseStore::new(state.limits.max_stored_responses));
    let v1 = generation
        .route("/models", get(info::models))
        .route(
            "/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/responses/{id}/input_items", get(responses::input_items))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ))
        .layer(Extension(stored));
    // Tokenizing costs CPU in proportion to the text sent, so it wants the key like generation.
    let tokenizing = Router::new()
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/debug/prefix_cache", get(prefix_cache::prefix_cache))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ));
    // Anthropic's Messages API: its own key header (`x-api-key`) and error shape, and
    // generation admitted like the OpenAI routes'.
    let anthropic = Router::new()
        .route(
            "/v1/messages",
            post(anthropic::handlers::messages)
                .route_layer(middleware::from_fn_with_state(state.clone(), admit)),
        )
        .route(
            "/v1/messages/count_tokens",
            post(anthropic::handlers::count_tokens),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            anthropic::errors::require_api_key,
        ))
        .layer(middleware::from_fn(anthropic::errors::reshape_errors));
    // `/health`, `/version`, `/metrics` and SGLang's info and load endpoints stay open: each
    // is a cheap read of fixed size, and what polls them (load balancers, routers,
    // orchestrators' probes, Prometheus) holds no API key.
    Router::new()
        .nest("/v1", v1)
        .merge(tokenizing)
        .merge(anthropic)
        .route("/health", get(info::health))
        .route("/version", get(info::version))
        .route("/metrics", get(info::metrics))
        .route("/server_info", get(sglang::server_info))
        .route("/get_server_info", get(sglang::server_info))
        .route("/model_info", get(sglang::model_info))
        .route("/get_model_info", get(sglang::model_info))
        .route("/get_load", get(sglang::load))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        // Bodies without a Content-Length (chunked) are cut off at the limit while being read.
        .layer(DefaultBodyLimit::max(state.limits.max_request_body_bytes))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_announced_oversize,
        ))
        // Outermost, so it sees every refusal, the early 413 and the API key's 401 included.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_refusals,
        ))
        .with_state(state)
}

async fn require_api_key(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(key) = &state.api_key {
        if !api_key::sent_key_matches(request.headers(), key) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// Admits a generation request unless the server is draining (then 503, which routers retry
/// on another replica). The admission is held until the reply's body is done or dropped, so
/// a drain waits for streams to finish, not just for their headers.
async fn admit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(admitted) = state.drain.admit() else {
        return ApiError::draining().into_response();
    };
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, HeldBody::wrap(body, admitted))
}

/// Counts each refused request in the metrics by its reason. `/health` is left out: its 503
/// reports the engine's state to whoever polls it, it refuses no work.
async fn count_refusals(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let counted = request.uri().path() != "/health";
    let response = next.run(request).await;
    if let (true, Some(Refusal(reason))) = (counted, response.extensions().get::<Refusal>()) {
        state.metrics.record_refusal(reason);
    }
    response
}

/// 413 for a body announced larger than `--max-request-body-bytes` by a client waiting for
/// `100 Continue`, before any of it is sent. A client that sends its body straight away is
/// read up to the limit instead: answering first and closing the socket under its upload
/// would reset the connection, and most clients would then see a broken pipe, not the 413.
async fn refuse_announced_oversize(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let waits_for_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !waits_for_continue {
        return next.run(request).await;
    }
    let limit = state.limits.max_request_body_bytes;
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match announced {
        Some(length) if length > limit as u64 => ApiError::too_large(format!(
            "the request body is {length} bytes; the limit is {limit} (the server's \
             --max-request-body-bytes)"
        ))
        .into_response(),
        _ => next.run(request).await,
    }
}

async fn unknown_route(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}",
        request.method(),
        request.uri().path()
    ))
}

async fn wrong_method() -> ApiError {
    ApiError::method_not_allowed()
}
