//! OpenAI's APIs: `/v1/completions` and `/v1/chat/completions` (request → `RequestPlan` →
//! the runs' deltas shaped by `ReplyBuilder`, streamed or whole, in `generation`) and the
//! Responses API (`responses`), and `/v1/embeddings` (`embeddings`: prefill-only engine
//! requests, one pooled vector per input). The plan and the runs are `generate`'s, shared with every
//! other protocol; only the request's reading and the reply's shape are OpenAI's.

pub mod chat_completions;
pub mod completions;
pub mod embeddings;
pub mod generation;
pub mod reply_builder;
pub mod responses;
