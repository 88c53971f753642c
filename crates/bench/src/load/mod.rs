//! Load generation: the server under test, when each request is sent (arrivals, rate,
//! concurrency), the streamed client that records each reply, and the run's progress.

pub mod arrivals;
pub mod bench_request;
pub mod client;
pub mod cpu_time;
pub mod endpoint;
pub mod load_plan;
pub mod progress;
pub mod reply_drafts;
pub mod request_rate;
pub mod sse;
pub mod target_server;
