//! tokenmill engine: schedules requests over one token budget, runs batched forward passes
//! over a paged KV cache, and samples. Token ids in, token ids out: never text.
//!
//! Folders follow the path of a step: `core` (the engine loop) asks `sched` what to run,
//! `worker` runs it through `models` (over `attention`, `kernels` and the `kv` cache),
//! `sample` turns logits into tokens, and `spec_decode` proposes drafts the step verifies.
//! `forward_batch` is the plain data the scheduler lays out and the models read, below
//! both; `config` and `error` are leaves.

pub mod attention;
pub mod config;
pub mod core;
pub mod error;
pub mod forward_batch;
pub mod kernels;
pub mod kv;
pub mod models;
pub mod sample;
pub mod sched;
pub mod spec_decode;
pub mod worker;

pub use crate::core::completion::Completion;
pub use crate::core::engine::Engine;
#[cfg(feature = "cli")]
pub use crate::core::engine_args::{EngineArgs, LoadedEngine};
pub use crate::core::engine_handle::{EngineHandle, EngineHealth};
pub use crate::core::engine_limits::EngineLimits;
pub use crate::core::step_times::StepTimes;
pub use config::{ConfigError, EngineConfig, PoolerConfig, PoolingType};
pub use error::{EngineError, Result};
pub use kv::kv_event::{KvEvent, KvEventSink};
pub use sample::sampling_params::SamplingParams;
pub use sample::token_constraint::{ConstraintCell, ConstraintError, TokenConstraint, TokenMask};
pub use sched::request::{EmbedRequest, EngineRequest, FinishReason, Request, RequestEvent, SeqId};
