//! The engine crate's integration tests, one binary (one link) for all of them.

mod abandoned_requests;
mod attention;
mod batching;
mod block_reuse;
mod checkpoint_formats;
mod common;
mod engine_config;
mod fair_prefill;
mod gemma3_real_file;
mod gguf_mutations;
mod golden;
mod itl_target;
mod k_quant_generation;
mod kv_cache_dtype;
mod kv_events;
mod kv_offload;
mod moe_batching;
mod prefix_cache_keys;
mod quant_matrix;
mod sampler;
mod scheduler_properties;
mod speculative_decoding;
mod step_failures;
mod stops;
mod token_constraints;
mod zoo;
