//! tokenmill engine: schedules requests over one token budget, runs batched forward passes
//! over a paged KV cache, and samples. Token ids in, token ids out: never text.

pub mod block_manager;
pub mod checkpoint;
pub mod compute_pool;
pub mod config_validation;
pub mod cpu_kernel;
#[cfg(feature = "cli")]
pub mod engine_args;
pub mod error;
pub mod forward_batch;
pub mod hf_overrides;
pub mod int8_probe;
pub mod kv_cache;
pub mod logit_bias;
pub mod mask_worker;
pub mod model_config;
pub mod models;
pub mod moe_expert_stats;
pub mod paged_attention;
pub mod read_bandwidth;

pub use error::{EngineError, Result};
pub mod engine;
pub mod engine_handle;
pub mod model_runner;
pub mod request;
pub mod sampler;
pub mod sampling_params;
pub mod scheduler;
pub mod sequence;
pub mod step_cost_model;
pub mod step_times;
pub mod token_constraint;

pub use config_validation::ConfigError;
pub use engine::{Completion, Engine, EngineConfig, EngineLimits};
#[cfg(feature = "cli")]
pub use engine_args::{EngineArgs, LoadedEngine};
pub use engine_handle::{EngineHandle, EngineHealth};
pub use request::{FinishReason, Request, RequestEvent, SeqId};
pub use sampling_params::SamplingParams;
pub use step_times::StepTimes;
pub use token_constraint::{ConstraintCell, ConstraintError, TokenConstraint, TokenMask};
