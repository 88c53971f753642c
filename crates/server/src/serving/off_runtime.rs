//! `off_runtime`: request work that costs CPU in proportion to what a client sent, moved off
//! the async workers.

use crate::api::api_error::ApiError;

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
