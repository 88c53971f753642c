//! `ReplyDrafts`: the draft counts a reply reports itself, read by the client from each
//! stream chunk's `timings` (llama-server).

use serde_json::Value;

/// Draft counts one reply reported itself (llama-server's `timings.draft_n` and
/// `timings.draft_n_accepted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyDrafts {
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
}

impl ReplyDrafts {
    /// The counts of a stream chunk's `timings`, when it has them (llama-server leaves them out
    /// of replies that drafted nothing).
    pub fn from_timings(timings: &Value) -> Option<Self> {
        Some(ReplyDrafts {
            draft_tokens: timings.get("draft_n")?.as_u64()?,
            accepted_tokens: timings
                .get("draft_n_accepted")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        })
    }
}
