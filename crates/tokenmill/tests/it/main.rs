//! The tokenmill crate's integration tests, one binary (one link) for all of them.

mod bench_api_key;
mod bench_spawn_signals;
mod common;
mod engine_bench;
mod generate_text_flags;
mod hub_models;
mod kv_offload_full_disk;
mod perplexity;
mod run_chat;
mod several_models;
mod shutdown;
mod startup_errors;
