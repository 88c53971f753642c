//! The bench crate's integration tests, one binary (one link) for all of them.

mod arrivals;
mod common;
mod compare_outputs;
mod datasets;
mod serve_metrics;
mod spawn;
mod spec_decode;
mod sweep_outputs;
mod tune;
