//! `EngineConfig`: every engine setting, and the one validation step that checks each against
//! the others, the model and the machine before anything is allocated, so a bad value is
//! refused with its name and reason instead of panicking, hanging or aborting later.

use super::config_error::ConfigError;
use super::kv_cache_dtype::KvCacheDtype;
use super::kv_cache_groups::KvCapacity;
use super::model_config::ModelConfig;
use super::partial_prefill_limits::PartialPrefillLimits;
use super::scheduling_policy::SchedulingPolicy;
use super::speculative_config::SpeculativeConfig;
use super::weight_mode::WeightMode;
use std::time::Duration;

/// Smallest accepted KV block: smaller blocks make block tables long and the prefix cache
/// fine-grained for no gain (vLLM accepts 8 and up as well).
pub const MIN_BLOCK_SIZE: usize = 8;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub block_size: usize,
    /// Exact pool size in blocks (pages: one block of tokens of a KV cache group's layers,
    /// see [`KvCacheGroups`](super::KvCacheGroups)); when `None` it is
    /// `kv_cache_memory_bytes` worth of them.
    pub num_kv_blocks: Option<usize>,
    pub kv_cache_memory_bytes: usize,
    /// Element type of the KV cache; `Auto` is f16, so the same memory holds twice the
    /// tokens of f32.
    pub kv_cache_dtype: KvCacheDtype,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// Defaults to the model's context length, capped by what the KV pool holds.
    pub max_model_len: Option<usize>,
    /// A prompt with more uncomputed tokens than this is long: capped to it per step and
    /// limited by `max_long_partial_prefills`. `None`: 4% of the context when several
    /// prompts may prefill at once, else no cap (vLLM's rule).
    pub long_prefill_token_threshold: Option<usize>,
    /// Most prompts whose prefill spans steps at once.
    pub max_num_partial_prefills: usize,
    /// Most of those that are long.
    pub max_long_partial_prefills: usize,
    pub enable_prefix_caching: bool,
    pub policy: SchedulingPolicy,
    pub weight_mode: WeightMode,
    /// Requests allowed to wait before new ones are refused.
    pub max_waiting: usize,
    /// Inter-token latency the scheduler holds by admitting less prefill per step
    /// (`--target-itl-ms`); the token budget stays the hard cap.
    pub target_itl: Option<Duration>,
    /// Drafts verified in the step's batch (`--speculative-config`); `None`: one token per
    /// decode step.
    pub speculative: Option<SpeculativeConfig>,
}

impl EngineConfig {
    /// Every default, stated once: `Default` and the flags' defaults (`EngineArgs`) read it.
    pub const DEFAULT: Self = Self {
        block_size: 16,
        num_kv_blocks: None,
        kv_cache_memory_bytes: 2 << 30,
        kv_cache_dtype: KvCacheDtype::Auto,
        max_num_batched_tokens: 512,
        max_num_seqs: 128,
        max_model_len: None,
        long_prefill_token_threshold: None,
        max_num_partial_prefills: 4,
        max_long_partial_prefills: 1,
        enable_prefix_caching: true,
        policy: SchedulingPolicy::Fcfs,
        weight_mode: WeightMode::Quantized,
        max_waiting: 1024,
        target_itl: None,
        speculative: None,
    };
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What a valid configuration works out to for a given model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvPlan {
    /// Pages in the pool, each a block of tokens of one KV cache group's layers.
    pub num_blocks: usize,
    pub max_model_len: usize,
    /// What the pool holds in tokens.
    pub capacity: KvCapacity,
}

impl EngineConfig {
    /// Checks every setting; `Ok` means the engine can be built with it.
    pub fn validate(&self, model: &ModelConfig) -> Result<(), ConfigError> {
        self.plan(model).map(|_| ())
    }

    /// The partial-prefill limits for a context of `max_model_len`, the threshold's default
    /// filled in.
    pub fn prefill_limits(&self, max_model_len: usize) -> PartialPrefillLimits {
        let default = PartialPrefillLimits::default_threshold(
            self.max_num_partial_prefills,
            max_model_len,
            self.block_size,
        );
        PartialPrefillLimits {
            max_partial: self.max_num_partial_prefills,
            max_long: self.max_long_partial_prefills,
            long_threshold: self.long_prefill_token_threshold.or(default),
        }
    }

    /// Validates and works out the KV pool size and the context length.
    pub fn plan(&self, model: &ModelConfig) -> Result<KvPlan, ConfigError> {
        self.check_scheduling()?;
        let num_blocks = self.check_kv_pool(model, physical_memory_bytes())?;
        let capacity = model.kv_cache_groups().capacity(
            num_blocks,
            self.block_size,
            self.max_num_batched_tokens,
        );
        let max_model_len = self.check_max_model_len(model, capacity.one_sequence)?;
        Ok(KvPlan {
            num_blocks,
            max_model_len,
            capacity,
        })
    }

    fn check_scheduling(&self) -> Result<(), ConfigError> {
        if !self.block_size.is_power_of_two() || self.block_size < MIN_BLOCK_SIZE {
            return Err(ConfigError::new(
                "block_size",
                self.block_size,
                format!("must be a power of two of at least {MIN_BLOCK_SIZE}"),
            ));
        }
        if self.max_num_seqs == 0 {
            return Err(ConfigError::new(
                "max_num_seqs",
                0,
                "must be at least 1, or no request could ever run",
            ));
        }
        if self.max_num_batched_tokens < self.max_num_seqs {
            return Err(ConfigError::new(
                "max_num_batched_tokens",
                self.max_num_batched_tokens,
                format!(
                    "must be at least 1 and at least max_num_seqs ({}): every running sequence \
                     needs a token of each step's budget, or the last ones never decode",
                    self.max_num_seqs
                ),
            ));
        }
        if self.long_prefill_token_threshold == Some(0) {
            return Err(ConfigError::new(
                "long_prefill_token_threshold",
                0,
                "must be at least 1 (omit it for the default): a cap of 0 schedules empty chunks",
            ));
        }
        if self.max_num_partial_prefills == 0 {
            return Err(ConfigError::new(
                "max_num_partial_prefills",
                0,
                "must be at least 1, or no prompt longer than a step could ever start",
            ));
        }
        if self.max_long_partial_prefills == 0
            || self.max_long_partial_prefills > self.max_num_partial_prefills
        {
            return Err(ConfigError::new(
                "max_long_partial_prefills",
                self.max_long_partial_prefills,
                format!(
                    "must be at least 1 and at most max_num_partial_prefills ({})",
                    self.max_num_partial_prefills
                ),
            ));
        }
        Ok(())
    }

    /// The pool's block count; it must hold a block and fit in the machine's memory. A
    /// block (page) holds one KV cache group's layers, so a model whose sliding layers form
    /// groups of their own gets as many more, smaller pages from the same bytes.
    fn check_kv_pool(
        &self,
        model: &ModelConfig,
        physical: Option<u64>,
    ) -> Result<usize, ConfigError> {
        if let Some(block) = self.kv_cache_dtype.block_values() {
            if !model.head_dim.is_multiple_of(block) {
                return Err(ConfigError::new(
                    "kv_cache_dtype",
                    self.kv_cache_dtype,
                    format!(
                        "quantizes blocks of {block} values along the head dim, and this                          model's head dim is {} (use f16 or bf16)",
                        model.head_dim
                    ),
                ));
            }
        }
        let groups = model.kv_cache_groups();
        let too_large = || ConfigError::new("block_size", self.block_size, "is too large");
        let values = [
            model.num_kv_heads,
            model.head_dim,
            groups.group_size(),
            self.block_size,
        ]
        .into_iter()
        .try_fold(1usize, usize::checked_mul)
        .ok_or_else(too_large)?;
        // Keys and values; `bytes_for` saturates, so an overflow reads as too large.
        let block_bytes = self
            .kv_cache_dtype
            .bytes_for(values, model.head_dim)
            .checked_mul(2)
            .filter(|&b| b < usize::MAX / 2)
            .ok_or_else(too_large)?;
        let (setting, value, num_blocks) = match self.num_kv_blocks {
            Some(n) => ("num_kv_blocks", n.to_string(), n),
            None => (
                "kv_cache_memory_bytes",
                self.kv_cache_memory_bytes.to_string(),
                self.kv_cache_memory_bytes / block_bytes.max(1),
            ),
        };
        if num_blocks == 0 {
            return Err(ConfigError::new(
                setting,
                value,
                format!("the KV cache must hold at least one block ({block_bytes} bytes)"),
            ));
        }
        let pool_bytes = (num_blocks as u128) * (block_bytes as u128);
        if let Some(physical) = physical.filter(|&p| pool_bytes >= p as u128) {
            return Err(ConfigError::new(
                setting,
                value,
                format!(
                    "a KV cache of {pool_bytes} bytes does not fit in this machine's \
                     {physical} bytes of memory"
                ),
            ));
        }
        Ok(num_blocks)
    }

    /// The context length: as set, or the model's capped by the longest sequence the pool
    /// holds alone (`pool_tokens`).
    fn check_max_model_len(
        &self,
        model: &ModelConfig,
        pool_tokens: usize,
    ) -> Result<usize, ConfigError> {
        let context = model.max_position_embeddings;
        match self.max_model_len {
            Some(len) if len < 2 => Err(ConfigError::new(
                "max_model_len",
                len,
                "must be at least 2 (a prompt token and a generated one)",
            )),
            Some(len) if len > context => Err(ConfigError::new(
                "max_model_len",
                len,
                format!("exceeds the model's context length {context}"),
            )),
            Some(len) => Ok(len),
            None => Ok(context.min(pool_tokens)),
        }
    }
}

/// Total RAM, when the platform says; `None` skips the check rather than guessing.
fn physical_memory_bytes() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads system constants and has no preconditions.
        let (pages, page_size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page_size > 0 {
            return Some(pages as u64 * page_size as u64);
        }
    }
    None
}
