//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`, as
//! the Anthropic SDKs and Claude Code speak it (with `ANTHROPIC_BASE_URL` pointed here).
//!
//! No plumbing of its own: a request is translated (`request`) into the chat conversation,
//! tools, output constraint and sampling fields the OpenAI chat route uses, planned by the
//! same `RequestPlan`, run by the same `ChoiceRun`s, and only the reply is shaped anew
//! (`reply`: a `message` object, or Anthropic's SSE event sequence). Errors leave in
//! Anthropic's shape (`errors`), `x-api-key` included. Every request field is honoured,
//! accepted as changing nothing, or refused by name (`fields`); docs/api.md lists them.

pub mod errors;
pub mod fields;
pub mod handlers;
pub mod reply;
pub mod request;
