//! `ApiError`: every failure a client can see, answered as an OpenAI error body with its status.
//! A refusal (the client's fault, or an overloaded or stopped engine: not a server fault) also
//! marks its response with a `Refusal`, which the metrics layer counts by reason.

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

/// Why a request was refused, as the `reason` label of `requests_refused_total`; carried as
/// a response extension from wherever the refusal happened to the layer that counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal(pub &'static str);

/// Every `Refusal` reason, so each is exported (at 0) before it first happens.
pub const REFUSAL_REASONS: [&str; 10] = [
    "invalid_request",
    "limit_exceeded",
    "unauthorized",
    "model_not_found",
    "not_found",
    "method_not_allowed",
    "timeout",
    "too_large",
    "overloaded",
    "unavailable",
];

impl ApiError {
    /// The refusal this error is, or `None` for a fault of the server (a 500).
    pub fn refusal(&self) -> Option<Refusal> {
        let reason = match (self.status.as_u16(), self.code) {
            (400, Some("limit_exceeded")) => "limit_exceeded",
            (400, _) => "invalid_request",
            (401, _) => "unauthorized",
            (404, Some("model_not_found")) => "model_not_found",
            (404, _) => "not_found",
            (405, _) => "method_not_allowed",
            (408, _) => "timeout",
            (413, _) => "too_large",
            (503, Some("overloaded")) => "overloaded",
            (503, _) => "unavailable",
            _ => return None,
        };
        Some(Refusal(reason))
    }

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

    /// A model of a server with several could not be loaded: the operator's fault (a broken
    /// file, too little memory), not the client's; only that model's requests get it.
    pub fn model_load_failed(name: &str, why: &str) -> Self {
        Self {
            code: Some("model_load_failed"),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                format!("the model `{name}` could not be loaded: {why}"),
            )
        }
    }

    /// A model of a server with several is counted as more memory than
    /// `--models-memory-gib` allows all models together: the operator's configuration, so a
    /// 503 (as for a server that cannot serve) with no retry hint, not a client's 4xx.
    pub fn over_memory_budget(name: &str, footprint: &str, budget: u64) -> Self {
        Self {
            code: Some("model_over_memory_budget"),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                format!(
                    "the model `{name}` needs {footprint}, more than --models-memory-gib {:.2} \
                     allows all models together; it cannot be loaded on this server",
                    budget as f64 / (1u64 << 30) as f64
                ),
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

    /// The server is draining (shutting down): it takes no new work, and a router should
    /// send the request to another replica. Counted as `unavailable`.
    pub fn draining() -> Self {
        Self {
            code: Some("shutting_down"),
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the server is shutting down and takes no new requests; send this one to another replica",
            )
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
        if let Some(refusal) = self.refusal() {
            response.extensions_mut().insert(refusal);
        }
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_reason_is_listed_and_server_faults_are_not_refusals() {
        let errors = [
            ApiError::bad_request("x"),
            ApiError {
                code: Some("limit_exceeded"),
                ..ApiError::bad_request("x")
            },
            ApiError::unauthorized(),
            ApiError::model_not_found("a", "b"),
            ApiError::not_found("x"),
            ApiError::method_not_allowed(),
            ApiError::timeout("x"),
            ApiError::too_large("x"),
            ApiError::overloaded("x"),
            ApiError::unavailable("x"),
        ];
        let reasons: Vec<&str> = errors.iter().map(|e| e.refusal().unwrap().0).collect();
        assert_eq!(reasons, REFUSAL_REASONS);
        assert_eq!(ApiError::engine_failed().refusal(), None);
    }
}
