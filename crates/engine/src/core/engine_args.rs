//! The engine's command-line flags (named as vLLM names them, with their defaults) and
//! building an `Engine` from them, shared by `serve`, `generate` and the engine benches.

use crate::config::hf_overrides::HfOverrides;
use crate::config::model_config::ModelConfig;
use crate::config::EngineConfig;
use crate::config::KvCacheDtype;
use crate::config::SchedulingPolicy;
use crate::config::SpeculativeConfig;
use crate::config::WeightMode;
use crate::config::{ConfigError, KvPlan};
use crate::core::engine::Engine;
use crate::error::{EngineError, Result};
use crate::kv::kv_disk_tier::KvOffloadConfig;
use crate::models::checkpoint::{
    self, default_model_path, Checkpoint, DummyCheckpoint, DummyDType,
};
use clap::Args;
use std::path::PathBuf;

/// Bytes in one GiB, the unit of `--kv-cache-memory-gib`.
const GIB: f64 = (1u64 << 30) as f64;

#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// A .gguf file or a Hugging Face directory; with --load-format dummy, a shape name
    /// (qwen3-0.6b, qwen3-30b-a3b, qwen2.5-0.5b, llama-3.2-1b, smollm2-135m, gemma3-270m).
    /// Default: the cached SmolLM2-135M-Instruct Q4_1.
    #[arg(long)]
    pub model: Option<String>,
    /// `auto` reads the checkpoint; `dummy` makes random weights of the named shape.
    #[arg(long, default_value = "auto")]
    pub load_format: String,
    /// A JSON object of Hugging Face config keys laid over the model's config, e.g.
    /// '{"num_hidden_layers": 8}' (also max_position_embeddings, num_experts_per_tok).
    #[arg(long)]
    pub hf_overrides: Option<HfOverrides>,
    /// Weight type for --load-format dummy: q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k
    /// (matrices narrower than whole 256-blocks: q8_0), bf16 or f32.
    #[arg(long, default_value = "q8_0")]
    pub dummy_dtype: DummyDType,
    /// `quantized` keeps quantized weights quantized; `f32` dequantizes everything (exact, slower).
    #[arg(long, default_value_t = EngineConfig::DEFAULT.weight_mode)]
    pub weight_mode: WeightMode,
    /// Tokens per KV-cache block.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.block_size)]
    pub block_size: usize,
    /// Memory for the KV cache, in GiB. A server backs all of it while idle in its first
    /// seconds, so it is taken, not only reserved.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.kv_cache_memory_bytes as f64 / GIB)]
    pub kv_cache_memory_gib: f64,
    /// KV cache element type: auto (= f16), f32, f16, bf16, q8_0 or fp8 (= fp8_e4m3). Halves
    /// hold twice the tokens of f32 in the same --kv-cache-memory-gib; q8_0 (blocks of 32 int8s
    /// with one f16 scale, quantized as they are written; the head dim must be a multiple of
    /// 32) 1.88 times f16's; fp8 (e4m3 bytes with one f16 scale per token's row of each KV
    /// head, any head dim) 1.94 times at head dim 64.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.kv_cache_dtype)]
    pub kv_cache_dtype: KvCacheDtype,
    /// Exact number of KV blocks, pages of one KV cache group's layers each (overrides
    /// --kv-cache-memory-gib).
    #[arg(long)]
    pub num_kv_blocks: Option<usize>,
    /// The token budget of one step, shared by decodes and prefill chunks.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.max_num_batched_tokens)]
    pub max_num_batched_tokens: usize,
    /// Most sequences running at once.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.max_num_seqs)]
    pub max_num_seqs: usize,
    /// Longest prompt + output (default: the model's context, capped by the KV pool).
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// A prompt with more uncomputed tokens than this is long: no step gives it more, and
    /// its chunk shrinks deep in its context so a step costs no more than a full budget of
    /// fresh prompt tokens
    /// (default: 4% of the context when --max-num-partial-prefills > 1, else no cap).
    #[arg(long)]
    pub long_prefill_token_threshold: Option<usize>,
    /// Most prompts whose prefill spans steps at once; prompts that fit in a step are not
    /// counted, so a short request never waits for a long one's chunks.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.max_num_partial_prefills)]
    pub max_num_partial_prefills: usize,
    /// Most long prompts (see --long-prefill-token-threshold) prefilling at once.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.max_long_partial_prefills)]
    pub max_long_partial_prefills: usize,
    /// Reuse KV blocks of shared prompt prefixes (on by default).
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    #[arg(long)]
    pub no_enable_prefix_caching: bool,
    /// fcfs or priority.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.policy)]
    pub scheduling_policy: SchedulingPolicy,
    /// Requests allowed to wait before new ones are refused.
    #[arg(long, default_value_t = EngineConfig::DEFAULT.max_waiting)]
    pub max_waiting: usize,
    /// Compute threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Inter-token latency to hold, in ms: each step admits only the prefill its predicted
    /// time leaves room for (decodes always run; the token budget stays the cap). Off by
    /// default.
    #[arg(long)]
    pub target_itl_ms: Option<f64>,
    /// Speculative decoding, as vLLM's JSON: '{"method": "ngram", "num_speculative_tokens":
    /// 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}' (methods: ngram, suffix,
    /// draft_model). Outputs stay exactly those without it; the step cost model verifies
    /// fewer drafts (down to none) where they would not pay.
    #[arg(long)]
    pub speculative_config: Option<String>,
    /// A directory for a second prefix-cache tier on disk: every full block that enters the
    /// prefix cache is also written there (by a writer thread; steps never wait on it), and
    /// prompts take hits from it, across restarts and from other replicas with the same
    /// model, weight mode, KV dtype and block size. Off by default.
    #[arg(long)]
    pub kv_offload_dir: Option<PathBuf>,
    /// Size cap of --kv-offload-dir in GiB: past it the least recently used block files
    /// are deleted. Default: no cap.
    #[arg(long, requires = "kv_offload_dir")]
    pub kv_offload_max_gib: Option<f64>,
}

/// An engine built from flags, with what the layers above need to serve it.
pub struct LoadedEngine {
    pub engine: Engine,
    /// The name clients use: the checkpoint's file stem, or the dummy shape.
    pub name: String,
    /// The checkpoint read, whose metadata holds the tokenizer and chat template; `None`
    /// for dummy weights, which have no vocabulary text.
    pub checkpoint_path: Option<PathBuf>,
}

impl EngineArgs {
    /// The engine configuration these flags ask for. Only what `EngineConfig` cannot
    /// express is checked here (values the flags alone have); everything else is left to
    /// `EngineConfig::plan`, so each setting has one check.
    pub fn engine_config(&self) -> std::result::Result<EngineConfig, ConfigError> {
        if !matches!(self.load_format.as_str(), "auto" | "dummy") {
            return Err(ConfigError::new(
                "load_format",
                &self.load_format,
                "must be auto or dummy",
            ));
        }
        let gib = self.kv_cache_memory_gib;
        if !(gib.is_finite() && gib > 0.0) {
            return Err(ConfigError::new(
                "kv_cache_memory_gib",
                gib,
                "must be a finite number of GiB above 0",
            ));
        }
        if let Some(cap) = self.kv_offload_max_gib {
            if !(cap.is_finite() && cap > 0.0) {
                return Err(ConfigError::new(
                    "kv_offload_max_gib",
                    cap,
                    "must be a finite number of GiB above 0",
                ));
            }
        }
        if self.threads == Some(0) {
            return Err(ConfigError::new(
                "threads",
                0,
                "must be at least 1 (omit it to use every core)",
            ));
        }
        let target_itl = match self.target_itl_ms {
            Some(ms) if ms.is_finite() && ms > 0.0 && ms <= 3_600_000.0 => {
                Some(std::time::Duration::from_secs_f64(ms / 1000.0))
            }
            Some(ms) => {
                return Err(ConfigError::new(
                    "target_itl_ms",
                    ms,
                    "must be a finite number of milliseconds above 0 (at most an hour)",
                ))
            }
            None => None,
        };
        Ok(EngineConfig {
            block_size: self.block_size,
            num_kv_blocks: self.num_kv_blocks,
            // Saturates for absurd sizes, which the physical-memory check then refuses.
            kv_cache_memory_bytes: (gib * GIB) as usize,
            kv_cache_dtype: self.kv_cache_dtype,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            max_model_len: self.max_model_len,
            long_prefill_token_threshold: self.long_prefill_token_threshold,
            max_num_partial_prefills: self.max_num_partial_prefills,
            max_long_partial_prefills: self.max_long_partial_prefills,
            enable_prefix_caching: !self.no_enable_prefix_caching,
            policy: self.scheduling_policy,
            weight_mode: self.weight_mode,
            max_waiting: self.max_waiting,
            target_itl,
            speculative: match &self.speculative_config {
                Some(json) => Some(SpeculativeConfig::from_json(json)?),
                None => None,
            },
        })
    }

    /// The one validation step for these flags against `model`, without loading weights;
    /// a refusal names the flag the operator typed.
    pub fn plan(&self, model: &ModelConfig) -> std::result::Result<KvPlan, ConfigError> {
        let config = self.engine_config()?;
        let mut model = model.clone();
        self.apply_overrides(&mut model)?;
        config.plan(&model).map_err(|bad| self.as_typed(bad))
    }

    /// `--hf-overrides` laid over `model`; a key that cannot apply to it is refused by the
    /// flag's name.
    fn apply_overrides(&self, model: &mut ModelConfig) -> std::result::Result<(), ConfigError> {
        match &self.hf_overrides {
            Some(overrides) => overrides
                .apply(model)
                .map_err(|reason| ConfigError::new("hf_overrides", overrides, reason)),
            None => Ok(()),
        }
    }

    /// Validates the flags, sizes the compute pools and loads the engine.
    pub fn build_engine(&self) -> Result<LoadedEngine> {
        let config = self.engine_config().map_err(EngineError::InvalidFlag)?;
        init_threads(self.threads);
        let (mut ckpt, name, checkpoint_path): (Box<dyn Checkpoint>, _, _) =
            if self.load_format == "dummy" {
                let shape = self.model.clone().unwrap_or_else(|| "qwen3-0.6b".into());
                let ckpt = DummyCheckpoint::new(&shape, self.dummy_dtype, 0)?;
                (Box::new(ckpt), shape, None)
            } else {
                let path = self.checkpoint_path()?;
                let name = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.display().to_string());
                (checkpoint::open(&path)?, name, Some(path))
            };
        self.apply_overrides(ckpt.config_mut())
            .map_err(EngineError::InvalidFlag)?;
        let mut engine = Engine::load(ckpt.as_mut(), config).map_err(|error| match error {
            EngineError::InvalidConfig(bad) => EngineError::InvalidFlag(self.as_typed(bad)),
            other => other,
        })?;
        if let Some(dir) = &self.kv_offload_dir {
            engine.enable_kv_offload(&KvOffloadConfig {
                dir: dir.clone(),
                max_bytes: self.kv_offload_max_gib.map(|gib| (gib * GIB) as u64),
                model_identity: self.model_identity(checkpoint_path.as_deref())?,
            });
        }
        Ok(LoadedEngine {
            engine,
            name,
            checkpoint_path,
        })
    }

    /// What the disk tier's fingerprint takes from the weights: the checkpoint's files
    /// (each one's name, length and first and last MiB, enough to tell two checkpoints
    /// apart without reading gigabytes) or the dummy shape, with every flag that changes
    /// the KV computed from them.
    fn model_identity(&self, checkpoint: Option<&std::path::Path>) -> Result<[u8; 32]> {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(format!(
            "load_format={} weight_mode={} dummy_dtype={:?} hf_overrides={:?} model={:?}\n",
            self.load_format, self.weight_mode, self.dummy_dtype, self.hf_overrides, self.model
        ));
        if let Some(path) = checkpoint {
            let mut files = if path.is_dir() {
                std::fs::read_dir(path)?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file())
                    .collect()
            } else {
                vec![path.to_path_buf()]
            };
            files.sort();
            for file in files {
                digest_file_ends(&mut h, &file)?;
            }
        }
        Ok(h.finalize().into())
    }

    /// `--model`, or the cached default model, which must then have been fetched.
    fn checkpoint_path(&self) -> Result<PathBuf> {
        match &self.model {
            Some(model) => Ok(PathBuf::from(model)),
            None => {
                let path = default_model_path();
                if path.exists() {
                    Ok(path)
                } else {
                    Err(EngineError::bad_file(
                        path,
                        "default model not found: run scripts/fetch-model.sh",
                    ))
                }
            }
        }
    }

    /// A refusal as the operator typed the value: the pool size in GiB, not in bytes.
    fn as_typed(&self, bad: ConfigError) -> ConfigError {
        if bad.setting == "kv_cache_memory_bytes" {
            ConfigError {
                setting: "kv_cache_memory_gib",
                value: self.kv_cache_memory_gib.to_string(),
                reason: bad.reason,
            }
        } else {
            bad
        }
    }
}

/// Sizes the compute pools before any model code runs.
pub fn init_threads(threads: Option<usize>) {
    let n = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    // candle's quantized matmuls read this once, on first use.
    std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
    crate::kernels::compute_pool::set_threads(n);
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
}

/// Adds a file's name, length and first and last MiB to `h`.
fn digest_file_ends(h: &mut sha2::Sha256, file: &std::path::Path) -> Result<()> {
    use sha2::Digest;
    use std::io::{Read, Seek, SeekFrom};
    const END: u64 = 1 << 20;
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    h.update(file.file_name().unwrap_or_default().as_encoded_bytes());
    h.update(len.to_le_bytes());
    let mut buf = Vec::new();
    f.by_ref().take(END).read_to_end(&mut buf)?;
    if len > END {
        f.seek(SeekFrom::Start(len.saturating_sub(END).max(END)))?;
        f.take(END).read_to_end(&mut buf)?;
    }
    h.update(&buf);
    Ok(())
}
