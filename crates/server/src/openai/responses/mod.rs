//! OpenAI's Responses API (`/v1/responses`): its routes (`handlers`), its request and input
//! items translated into the chat plan every turn-based protocol runs (`translate`), the
//! run's deltas shaped into output items and typed stream events (`output`) inside the
//! response object (`reply`), and the responses kept for `previous_response_id` (`store`).

pub mod handlers;
pub mod output;
pub mod reply;
pub mod request;
pub mod store;
pub mod translate;
