//! Reports: a run's result from its records (vllm bench serve's definitions), latency
//! distributions, goodput, per-class latencies, speculative decoding, and the printed table,
//! the saved JSON and the saved responses.

pub mod benchmark_result;
pub mod class_latencies;
pub mod distribution;
pub mod goodput;
pub mod prompt_class;
pub mod saved_responses;
pub mod serve_report;
pub mod spec_decode_report;
