//! What every route handler shares: the server's state (`AppState`), the limits on one
//! request, the JSON body reader, the API key check, the drain that shutdown waits on, a
//! reply body that holds a guard while it streams, and the blocking pool that CPU-heavy
//! request work runs on.

pub mod api_key;
pub mod app_state;
pub mod drain;
pub mod held_body;
pub mod json_body;
pub mod off_runtime;
pub mod request_limits;
