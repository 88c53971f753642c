//! `ServingConfig`: the engine settings a served model runs with, as the info endpoints
//! (`/server_info`, `/model_info`) and vLLM's `cache_config_info` metric report them.

use tokenmill_engine::config::kv_cache_dtype::KvCacheDtype;
use tokenmill_engine::{EngineArgs, EngineLimits};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingConfig {
    /// What the weights were read from; `None` for dummy weights.
    pub model_path: Option<String>,
    pub block_size: usize,
    pub num_kv_blocks: usize,
    pub max_model_len: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub enable_prefix_caching: bool,
    /// The KV cache's element type as vLLM's `cache_dtype` names it (`auto` resolved).
    pub kv_cache_dtype: &'static str,
}

impl ServingConfig {
    /// From the flags an engine was built with and the limits it was built to.
    pub fn new(
        args: &EngineArgs,
        limits: &EngineLimits,
        model_path: Option<String>,
    ) -> anyhow::Result<Self> {
        let config = args.engine_config()?;
        Ok(Self {
            model_path,
            block_size: limits.block_size,
            num_kv_blocks: limits.num_kv_blocks,
            max_model_len: limits.max_model_len,
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            enable_prefix_caching: config.enable_prefix_caching,
            kv_cache_dtype: match config.kv_cache_dtype.resolve() {
                KvCacheDtype::F32 => "float32",
                KvCacheDtype::Bf16 => "bfloat16",
                _ => "float16",
            },
        })
    }

    /// Tokens the KV pool holds.
    pub fn kv_tokens(&self) -> usize {
        self.num_kv_blocks * self.block_size
    }
}
