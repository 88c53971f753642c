//! The HTTP routes and the layers around them (API key, body limit, OpenAI-shaped 404/405).

pub mod chat_completions;
pub mod completions;
pub mod generation;
pub mod info;
pub mod tokenize;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::api_error::ApiError;
use crate::app_state::AppState;

/// Largest request body accepted; bigger ones get 413.
pub const MAX_BODY_BYTES: usize = 8 << 20;

pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/completions", post(completions::completions))
        .route(
            "/chat/completions",
            post(chat_completions::chat_completions),
        )
        .route("/models", get(info::models))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ));
    Router::new()
        .nest("/v1", v1)
        .route("/health", get(info::health))
        .route("/version", get(info::version))
        .route("/metrics", get(info::metrics))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Runs CPU-heavy request work (tokenizing, rendering a chat template) on the blocking pool,
/// so a large prompt never stalls the async workers that serve every other connection.
pub async fn off_runtime<T, F>(work: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
}

async fn require_api_key(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(key) = &state.api_key {
        let sent = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if sent != Some(key.as_str()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
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
