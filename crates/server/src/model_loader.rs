//! Command-line engine flags (named as vLLM names them) and loading a model with its
//! tokenizer and chat template.

use crate::chat_template::ChatTemplate;
use crate::tokenizer::{self, Tokenizer};
use anyhow::{anyhow, bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokenmill_engine::checkpoint::{self, Checkpoint, DummyCheckpoint, DummyDType};
use tokenmill_engine::kv_cache::KvCacheDtype;
use tokenmill_engine::models::WeightMode;
use tokenmill_engine::scheduler::SchedulingPolicy;
use tokenmill_engine::{Engine, EngineConfig, EngineError};

/// The default model and where it is cached live in the engine crate, beside the loader.
pub use tokenmill_engine::checkpoint::{default_model_path, DEFAULT_MODEL_FILE};

#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// A .gguf file or a Hugging Face directory; with --load-format dummy, a shape name
    /// (qwen3-0.6b, smollm2-135m). Default: the cached SmolLM2-135M-Instruct Q4_1.
    #[arg(long)]
    pub model: Option<String>,
    /// `auto` reads the checkpoint; `dummy` makes random weights of the named shape.
    #[arg(long, default_value = "auto")]
    pub load_format: String,
    /// Weight type for --load-format dummy: q4_0, q4_1, q8_0, q4_k, q5_k, q6_k (matrices
    /// narrower than whole 256-blocks: q8_0), bf16 or f32.
    #[arg(long, default_value = "q8_0")]
    pub dummy_dtype: DummyDType,
    /// `quantized` keeps quantized weights quantized; `f32` dequantizes everything (exact, slower).
    #[arg(long, default_value = "quantized")]
    pub weight_mode: WeightMode,
    /// Tokens per KV-cache block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// Memory for the KV cache, in GiB.
    #[arg(long, default_value_t = 2.0)]
    pub kv_cache_memory_gib: f64,
    /// KV cache element type: auto (= f16), f32, f16 or bf16. Halves hold twice the tokens
    /// in the same --kv-cache-memory-gib.
    #[arg(long, default_value = "auto")]
    pub kv_cache_dtype: KvCacheDtype,
    /// Exact number of KV blocks (overrides --kv-cache-memory-gib).
    #[arg(long)]
    pub num_kv_blocks: Option<usize>,
    /// The token budget of one step, shared by decodes and prefill chunks.
    #[arg(long, default_value_t = 512)]
    pub max_num_batched_tokens: usize,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 128)]
    pub max_num_seqs: usize,
    /// Longest prompt + output (default: the model's context, capped by the KV pool).
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// Most tokens one sequence may take from a step's budget.
    #[arg(long)]
    pub long_prefill_token_threshold: Option<usize>,
    /// Reuse KV blocks of shared prompt prefixes (on by default).
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    #[arg(long)]
    pub no_enable_prefix_caching: bool,
    /// fcfs or priority.
    #[arg(long, default_value = "fcfs")]
    pub scheduling_policy: SchedulingPolicy,
    /// Requests allowed to wait before new ones are refused.
    #[arg(long, default_value_t = 1024)]
    pub max_waiting: usize,
    /// Compute threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl EngineArgs {
    /// The engine configuration these flags ask for. Values only the flags have (a
    /// fractional GiB) are checked here; everything else by `EngineConfig::validate`.
    pub fn engine_config(&self) -> anyhow::Result<EngineConfig> {
        let gib = self.kv_cache_memory_gib;
        if !(gib.is_finite() && gib > 0.0) {
            bail!("--kv-cache-memory-gib {gib}: must be a finite number of GiB above 0");
        }
        if self.threads == Some(0) {
            bail!("--threads 0: must be at least 1 (omit it to use every core)");
        }
        Ok(EngineConfig {
            block_size: self.block_size,
            num_kv_blocks: self.num_kv_blocks,
            // Saturates for absurd sizes, which the physical-memory check then refuses.
            kv_cache_memory_bytes: (gib * (1u64 << 30) as f64) as usize,
            kv_cache_dtype: self.kv_cache_dtype,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            max_model_len: self.max_model_len,
            long_prefill_token_threshold: self.long_prefill_token_threshold,
            enable_prefix_caching: !self.no_enable_prefix_caching,
            policy: self.scheduling_policy,
            weight_mode: self.weight_mode,
            max_waiting: self.max_waiting,
            target_itl: None,
        })
    }

    /// An engine error as the operator should read it: a refused setting is named by its flag.
    fn explain(&self, error: EngineError) -> anyhow::Error {
        match error {
            EngineError::InvalidConfig(bad) if bad.setting == "kv_cache_memory_bytes" => {
                anyhow!(
                    "--kv-cache-memory-gib {}: {}",
                    self.kv_cache_memory_gib,
                    bad.reason
                )
            }
            EngineError::InvalidConfig(bad) => {
                anyhow!("{} {}: {}", bad.flag(), bad.value, bad.reason)
            }
            other => other.into(),
        }
    }
}

/// An engine with what the server needs around it.
pub struct LoadedModel {
    pub engine: Engine,
    /// `None` for dummy weights, which have no vocabulary text.
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub chat_template: Option<ChatTemplate>,
    /// The name clients use (file stem or shape).
    pub name: String,
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
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
}

pub fn load(args: &EngineArgs) -> anyhow::Result<LoadedModel> {
    let config = args.engine_config()?;
    init_threads(args.threads);
    match args.load_format.as_str() {
        "dummy" => {
            let shape = args.model.clone().unwrap_or_else(|| "qwen3-0.6b".into());
            let mut ckpt = DummyCheckpoint::new(&shape, args.dummy_dtype, 0)?;
            let engine = Engine::load(&mut ckpt, config).map_err(|e| args.explain(e))?;
            Ok(LoadedModel {
                engine,
                tokenizer: None,
                chat_template: None,
                name: shape,
            })
        }
        "auto" => {
            let path = args
                .model
                .as_ref()
                .map(PathBuf::from)
                .unwrap_or_else(default_model_path);
            if args.model.is_none() && !path.exists() {
                bail!(
                    "default model not found at {}: run scripts/fetch-model.sh",
                    path.display()
                );
            }
            load_checkpoint(&path, config).map_err(|e| match e.downcast::<EngineError>() {
                Ok(engine_error) => args.explain(engine_error),
                Err(other) => other,
            })
        }
        other => bail!("unknown --load-format {other:?} (auto, dummy)"),
    }
}

fn load_checkpoint(path: &Path, config: EngineConfig) -> anyhow::Result<LoadedModel> {
    let mut ckpt: Box<dyn Checkpoint> = checkpoint::open(path)?;
    let engine = Engine::load(ckpt.as_mut(), config)?;
    let (tokenizer, template) = if path.is_dir() {
        let tok = Tokenizer::from_hf_dir(path)?;
        (tok, tokenizer::hf_chat_template(path)?)
    } else {
        tokenizer::from_gguf_file(path)?
    };
    let chat_template = template
        .map(|t| ChatTemplate::for_tokenizer(t, &tokenizer))
        .transpose()
        .with_context(|| format!("{}: bad chat template", path.display()))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    Ok(LoadedModel {
        engine,
        tokenizer: Some(Arc::new(tokenizer)),
        chat_template,
        name,
    })
}
