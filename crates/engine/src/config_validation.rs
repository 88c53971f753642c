//! The one validation step for an `EngineConfig`: every setting checked against the others,
//! the model and the machine before anything is allocated, so a bad value is refused with
//! its name and reason instead of panicking, hanging or aborting later.

use crate::engine::EngineConfig;
use crate::model_config::ModelConfig;

/// Smallest accepted KV block: smaller blocks make block tables long and the prefix cache
/// fine-grained for no gain (vLLM accepts 8 and up as well).
pub const MIN_BLOCK_SIZE: usize = 8;

/// A refused setting: which one (named as the config field and the vLLM flag are), its
/// value, and why it cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} = {value}: {reason}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn new(
        setting: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            setting,
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// The command-line flag that sets this value (`block_size` → `--block-size`).
    pub fn flag(&self) -> String {
        format!("--{}", self.setting.replace('_', "-"))
    }
}

/// What a valid configuration works out to for a given model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvPlan {
    pub num_blocks: usize,
    pub max_model_len: usize,
}

impl EngineConfig {
    /// Checks every setting; `Ok` means the engine can be built with it.
    pub fn validate(&self, model: &ModelConfig) -> Result<(), ConfigError> {
        self.plan(model).map(|_| ())
    }

    /// Validates and works out the KV pool size and the context length.
    pub fn plan(&self, model: &ModelConfig) -> Result<KvPlan, ConfigError> {
        self.check_scheduling()?;
        let num_blocks = self.check_kv_pool(model, physical_memory_bytes())?;
        let max_model_len = self.check_max_model_len(model, num_blocks)?;
        Ok(KvPlan {
            num_blocks,
            max_model_len,
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
                "must be at least 1 (omit it for no cap): a cap of 0 schedules empty chunks",
            ));
        }
        Ok(())
    }

    /// The pool's block count; it must hold a block and fit in the machine's memory.
    fn check_kv_pool(
        &self,
        model: &ModelConfig,
        physical: Option<u64>,
    ) -> Result<usize, ConfigError> {
        let block_bytes = model
            .kv_bytes_per_token(self.kv_cache_dtype.element_size())
            .checked_mul(self.block_size)
            .ok_or_else(|| ConfigError::new("block_size", self.block_size, "is too large"))?;
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

    fn check_max_model_len(
        &self,
        model: &ModelConfig,
        num_blocks: usize,
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
            None => Ok(context.min(num_blocks.saturating_mul(self.block_size))),
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
