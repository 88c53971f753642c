//! What went wrong talking to the Hub, sorted by what the caller does next: an unreachable
//! Hub falls back to the cache, an HTTP status does not.

use hf_hub::api::sync::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// No answer (no route, refused, DNS, timeout, TLS) or a server error: the cache may serve.
    #[error("{0}")]
    Unreachable(String),
    /// The Hub answered with this status (401 gated or private, 404 no such repo or revision).
    #[error("HTTP {0}")]
    Status(u16),
    /// A file that arrived but is not what the Hub said it is.
    #[error("{0}")]
    Corrupt(String),
    #[error("{0}")]
    Other(String),
}

impl HubError {
    /// Whether the cache should be tried instead, as `huggingface_hub` does.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Self::Unreachable(_) => true,
            Self::Status(code) => *code >= 500,
            _ => false,
        }
    }
}

impl From<ApiError> for HubError {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::RequestError(inner) => match *inner {
                ureq::Error::StatusCode(code) => Self::Status(code),
                other => Self::Unreachable(other.to_string()),
            },
            ApiError::TooManyRetries(inner) => Self::from(*inner),
            // Reading the body failed part way (the connection dropped): the partial file
            // stays for the next try to resume.
            ApiError::IoError(e) => Self::Unreachable(format!("transfer cut: {e}")),
            other => Self::Other(other.to_string()),
        }
    }
}
