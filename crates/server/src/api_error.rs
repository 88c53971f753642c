//! `ApiError`: every failure a client can see, answered as an OpenAI error body with its status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokenmill_engine::EngineError;

/// An error answer: `{"error": {"message", "type", "param", "code"}}` plus its HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before retrying (sent as `Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// A 400 that names the request field at fault, so clients can point at it.
    pub fn bad_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.into()),
            ..Self::bad_request(message)
        }
    }

    pub fn unauthorized() -> Self {
        Self {
            code: Some("invalid_api_key"),
            ..Self::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "missing or incorrect API key: send `Authorization: Bearer <key>`",
            )
        }
    }

    pub fn model_not_found(requested: &str, served: &str) -> Self {
        Self {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model `{requested}` does not exist; this server serves `{served}`"),
            )
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "this method is not allowed on this path",
        )
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self {
            code: Some("request_too_large"),
            ..Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                message,
            )
        }
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self {
            code: Some("request_timeout"),
            ..Self::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                message,
            )
        }
    }

    pub fn overloaded(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(1),
            code: Some("overloaded"),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
        }
    }

    /// The server cannot serve at all (its engine failed or stopped); no retry hint.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            code: Some("engine_unavailable"),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
        }
    }

    /// The engine failed while computing the request (see the server log for why).
    pub fn engine_failed() -> Self {
        Self {
            code: Some("engine_error"),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the engine failed while computing this request; the server log has the cause",
            )
        }
    }

    /// A fault of the server, never of the client; the message is logged as well.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        tracing::error!("internal error: {message}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::InvalidRequest(message) => Self::bad_request(message),
            EngineError::Overloaded(_) => Self::overloaded(error.to_string()),
            EngineError::EngineStopped => Self::overloaded("the engine is shutting down"),
            other => Self::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
