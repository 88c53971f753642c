//! The worker: runs one batched forward pass per step over the KV cache.

pub mod model_runner;
