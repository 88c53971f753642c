//! `JsonBody<T>`: a JSON request-body extractor whose every rejection is an OpenAI error.
//!
//! axum's own `Json` answers with plain-text bodies and 415/422 statuses; clients of an
//! OpenAI-compatible server expect 400 with an error object naming the bad field. Bodies
//! nested deeper than the server's limit are refused before they are parsed.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::api::api_error::ApiError;
use crate::serving::app_state::AppState;

pub struct JsonBody<T>(pub T);

impl<T> FromRequest<Arc<AppState>> for JsonBody<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let limit = Duration::from_secs(state.limits.request_body_timeout);
        let read = tokio::time::timeout(limit, Bytes::from_request(req, state))
            .await
            .map_err(|_| {
                ApiError::timeout(format!(
                    "the request body did not arrive within {} s (the server's \
                     --request-body-timeout)",
                    limit.as_secs()
                ))
            })?;
        let bytes = read.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large(format!(
                    "the request body is larger than {} bytes (the server's \
                     --max-request-body-bytes)",
                    state.limits.max_request_body_bytes
                ))
            } else {
                ApiError::bad_request(format!(
                    "could not read the request body: {}",
                    rejection.body_text()
                ))
            }
        })?;
        state.limits.check_json_depth(&bytes)?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a body, naming the offending field (`messages[0].content`) when a value has the wrong type.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if std::str::from_utf8(bytes).is_err() {
        return Err(ApiError::bad_request("the request body is not valid UTF-8"));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; send a JSON object",
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("the request body is not valid JSON: {inner}"))
        } else if path == "." || path.is_empty() {
            ApiError::bad_request(format!("invalid request: {inner}"))
        } else {
            ApiError::bad_param(path.clone(), format!("invalid value for `{path}`: {inner}"))
        }
    })?;
    deserializer
        .end()
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Sample {
        #[allow(dead_code)]
        temperature: Option<f32>,
    }

    #[test]
    fn a_wrong_type_names_the_field() {
        let error = parse_json::<Sample>(br#"{"temperature": "hot"}"#).unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        assert_eq!(error.param.as_deref(), Some("temperature"));
    }

    #[test]
    fn malformed_json_and_bad_utf8_are_bad_requests() {
        for body in [
            &b"{\"temperature\": "[..],
            b"\xff\xfe{}",
            b"",
            b"{} trailing",
        ] {
            let error = parse_json::<Sample>(body).unwrap_err();
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{body:?}");
        }
    }

    #[test]
    fn unknown_fields_are_ignored() {
        assert!(parse_json::<Sample>(br#"{"cache_prompt": true}"#).is_ok());
    }
}
