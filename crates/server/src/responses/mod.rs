//! OpenAI's Responses API (`/v1/responses`): its request and input items translated into the
//! chat plan every turn-based protocol runs (`translate`), the run's deltas shaped into
//! output items and typed stream events (`output`), the responses kept for
//! `previous_response_id` (`store`), and the handlers (`route`).

pub mod output;
pub mod request;
pub mod route;
pub mod store;
pub mod translate;
