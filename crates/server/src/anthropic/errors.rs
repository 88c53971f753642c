//! Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`, for every
//! refusal on the Messages routes — those the handlers make and those the shared layers make
//! (a body that is not JSON, a drain's 503) — and the API key as Anthropic clients send it.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::api::api_error::ApiError;
use crate::serving::api_key::{constant_time_eq, sent_key_matches};
use crate::serving::app_state::AppState;

/// Error bodies are a few hundred bytes; anything larger is passed on untouched.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Anthropic's error `type` for an HTTP status, as its SDKs map them to exception classes.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The Anthropic body of an error: the field at fault leads the message (Anthropic's shape
/// has no `param`), as Anthropic's own messages name it (`max_tokens: Field required`).
pub fn body(status: StatusCode, message: &str, param: Option<&str>) -> Value {
    let message = match param {
        Some(param) if !message.starts_with(param) => format!("{param}: {message}"),
        _ => message.to_owned(),
    };
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

/// The SSE `error` event a stream ends with when the engine fails under it.
pub fn engine_failed_event() -> Value {
    let error = ApiError::engine_failed();
    body(error.status, &error.message, None)
}

/// Rewrites an OpenAI-shaped error answer into Anthropic's, keeping its status, headers
/// (`Retry-After`) and extensions (the `Refusal` the metrics count).
pub async fn reshape_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if !(response.status().is_client_error() || response.status().is_server_error()) {
        return response;
    }
    let (mut parts, body_in) = response.into_parts();
    let Ok(bytes) = to_bytes(body_in, MAX_ERROR_BODY).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let reshaped = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v.get("error").cloned())
        .and_then(|error| {
            let message = error.get("message")?.as_str()?.to_owned();
            let param = error
                .get("param")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some(body(parts.status, &message, param.as_deref()))
        });
    match reshaped {
        Some(value) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            parts.headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            Response::from_parts(parts, Body::from(value.to_string()))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// Whether the request carries the server's key as Anthropic's SDKs send it (`x-api-key`)
/// or as a bearer token (their `auth_token`, and Claude Code's `ANTHROPIC_AUTH_TOKEN`).
pub fn sent_anthropic_key_matches(headers: &HeaderMap, key: &str) -> bool {
    let x_api_key = headers
        .get("x-api-key")
        .is_some_and(|sent| constant_time_eq(sent.as_bytes(), key.as_bytes()));
    x_api_key || sent_key_matches(headers, key)
}

/// `--api-key` on the Messages routes: `x-api-key` or `Authorization: Bearer`.
pub async fn require_api_key(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(key) = &state.api_key {
        if !sent_anthropic_key_matches(request.headers(), key) {
            return ApiError {
                message: "missing or incorrect API key: send `x-api-key: <key>` (or \
                          `Authorization: Bearer <key>`)"
                    .into(),
                ..ApiError::unauthorized()
            }
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_the_types_the_sdks_know() {
        let shape = body(
            StatusCode::BAD_REQUEST,
            "`max_tokens` is required",
            Some("max_tokens"),
        );
        assert_eq!(
            shape,
            json!({"type": "error", "error": {"type": "invalid_request_error",
                   "message": "max_tokens: `max_tokens` is required"}})
        );
        assert_eq!(error_type(StatusCode::UNAUTHORIZED), "authentication_error");
        assert_eq!(error_type(StatusCode::NOT_FOUND), "not_found_error");
        assert_eq!(
            error_type(StatusCode::SERVICE_UNAVAILABLE),
            "overloaded_error"
        );
        assert_eq!(error_type(StatusCode::INTERNAL_SERVER_ERROR), "api_error");
    }

    #[test]
    fn the_key_may_come_as_x_api_key_or_bearer() {
        let with = |name: &str, value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
            headers
        };
        assert!(sent_anthropic_key_matches(
            &with("x-api-key", "sesame"),
            "sesame"
        ));
        assert!(sent_anthropic_key_matches(
            &with("authorization", "Bearer sesame"),
            "sesame"
        ));
        assert!(!sent_anthropic_key_matches(
            &with("x-api-key", "sesam"),
            "sesame"
        ));
        assert!(!sent_anthropic_key_matches(&HeaderMap::new(), "sesame"));
    }
}
