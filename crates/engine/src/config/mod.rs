//! Configuration, a leaf: what the engine and the model are set to, validated once at
//! startup. Everything names it; it names nothing above it.

pub mod config_error;
pub mod engine_config;
pub mod hf_config;
pub mod hf_overrides;
pub mod kv_cache_dtype;
pub mod kv_cache_groups;
pub mod local_attention;
pub mod model_config;
pub mod model_presets;
pub mod partial_prefill_limits;
pub mod pooler_config;
pub mod scheduling_policy;
pub mod sliding_window;
pub mod speculative_config;
pub mod weight_mode;

pub use config_error::ConfigError;
pub use engine_config::{EngineConfig, KvPlan};
pub use kv_cache_dtype::KvCacheDtype;
pub use kv_cache_groups::{KvCacheGroups, KvCapacity, KvGroup};
pub use local_attention::{LayerKind, LocalAttention};
pub use model_config::ModelConfig;
pub use partial_prefill_limits::PartialPrefillLimits;
pub use pooler_config::{PoolerConfig, PoolingType};
pub use scheduling_policy::SchedulingPolicy;
pub use sliding_window::SlidingWindow;
pub use speculative_config::{SpeculativeConfig, SpeculativeMethod, SuffixSettings};
pub use weight_mode::WeightMode;
