//! `ServingConfig`: the engine settings a served model runs with, as the info endpoints
//! (`/server_info`, `/model_info`) and vLLM's `cache_config_info` metric report them.

use tokenmill_engine::config::kv_cache_dtype::KvCacheDtype;
use tokenmill_engine::config::KvCapacity;
use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
use tokenmill_engine::{EngineArgs, EngineLimits};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingConfig {
    /// What the weights were read from; `None` for dummy weights.
    pub model_path: Option<String>,
    pub block_size: usize,
    /// Pages of the KV pool (a block of tokens of one KV cache group's layers each).
    pub num_kv_blocks: usize,
    /// Tokens the pool holds at short context (every group takes a page per block), and
    /// for one sequence alone (sliding groups holding only their window's pages).
    pub kv_capacity: KvCapacity,
    pub max_model_len: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub enable_prefix_caching: bool,
    /// The KV cache's element type as vLLM's `cache_dtype` names it (`auto` resolved).
    pub kv_cache_dtype: &'static str,
    /// The matmul path this process runs (`CpuKernel::active`), e.g. `amx_int8`.
    pub cpu_kernel: &'static str,
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
            kv_capacity: limits.kv_capacity,
            max_model_len: limits.max_model_len,
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            enable_prefix_caching: config.enable_prefix_caching,
            kv_cache_dtype: match config.kv_cache_dtype.resolve() {
                KvCacheDtype::F32 => "float32",
                KvCacheDtype::Bf16 => "bfloat16",
                KvCacheDtype::Q8_0 => "q8_0",
                KvCacheDtype::Fp8 => "fp8",
                _ => "float16",
            },
            cpu_kernel: CpuKernel::active().name(),
        })
    }

    /// Tokens the KV pool holds whatever the sequences' lengths: at short context, where a
    /// token takes a page in every KV cache group (a model with sliding layers holds more
    /// once its sequences outgrow the window; see `kv_capacity`).
    pub fn kv_tokens(&self) -> usize {
        self.kv_capacity.short_context
    }
}
