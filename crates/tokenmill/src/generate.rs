//! `tokenmill generate`: offline batch inference — every prompt goes through the engine
//! together, so this is also the simplest way to watch batching work.

use anyhow::{bail, Context};
use clap::Args;
use tokenmill_engine::{EngineArgs, Request, SamplingParams};
use tokenmill_server::model::model_loader;
use tokenmill_server::model::model_text_args::ModelTextArgs;
use tokenmill_server::text::chat_template::ChatMessage;
use tokenmill_server::text::generation_config::GenerationConfig;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub text: ModelTextArgs,
    /// A prompt (repeat for several).
    #[arg(long = "prompt")]
    pub prompts: Vec<String>,
    /// A file with one prompt per line.
    #[arg(long)]
    pub prompts_file: Option<std::path::PathBuf>,
    /// Wrap each prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Print one JSON object per prompt (text, token ids, finish reason) instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Sampling flags. Those left out take the `--generation-config` defaults, then the ones in
/// brackets (greedy, 64 tokens).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// [64]
    #[arg(long)]
    pub max_tokens: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub min_tokens: usize,
    /// 0 is greedy. [0]
    #[arg(long)]
    pub temperature: Option<f32>,
    /// [off]
    #[arg(long)]
    pub top_k: Option<usize>,
    /// [1]
    #[arg(long)]
    pub top_p: Option<f32>,
    /// [0]
    #[arg(long)]
    pub min_p: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// [1]
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long)]
    pub ignore_eos: bool,
    /// Also report this many alternatives' logprobs per token (with --json).
    #[arg(long)]
    pub logprobs: Option<usize>,
}

impl SamplingArgs {
    /// The flags given, else the generation config's defaults, else greedy with 64 tokens.
    pub fn params(&self, defaults: &GenerationConfig) -> SamplingParams {
        // Transformers and vLLM both disable top-k with a value below 1.
        let default_top_k = defaults
            .top_k
            .and_then(|k| usize::try_from(k).ok())
            .filter(|&k| k > 0);
        SamplingParams {
            temperature: self.temperature.or(defaults.temperature).unwrap_or(0.0),
            top_k: self.top_k.or(default_top_k),
            top_p: self.top_p.or(defaults.top_p).unwrap_or(1.0),
            min_p: self.min_p.or(defaults.min_p).unwrap_or(0.0),
            seed: self.seed,
            repetition_penalty: self
                .repetition_penalty
                .or(defaults.repetition_penalty)
                .unwrap_or(1.0),
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            max_tokens: self.max_tokens.or(defaults.max_new_tokens).unwrap_or(64),
            min_tokens: self.min_tokens,
            ignore_eos: self.ignore_eos,
            logprobs: self.logprobs,
            ..SamplingParams::default()
        }
    }
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let mut prompts = args.prompts.clone();
    if let Some(path) = &args.prompts_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        prompts.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string),
        );
    }
    if prompts.is_empty() {
        bail!("no prompts: give --prompt TEXT or --prompts-file FILE");
    }
    let mut model = model_loader::load_with(&args.engine, &args.text)?;
    let tokenizer = model
        .tokenizer
        .clone()
        .context("this model has no tokenizer (dummy weights)")?;
    let mut requests = Vec::with_capacity(prompts.len());
    for prompt in &prompts {
        let text = if args.chat {
            let template = model.chat_template.as_ref().context(
                "the model has no chat template: give --chat-template (a file or the Jinja text)",
            )?;
            template.render(&[ChatMessage::new("user", prompt.as_str())], true)?
        } else {
            prompt.clone()
        };
        let ids = tokenizer.encode(&text, true)?;
        requests.push(Request {
            prompt: ids,
            params: args.sampling.params(&model.generation_config),
            priority: 0,
            constraint: None,
        });
    }
    if args.json {
        // The JSON lines carry every token's logprob, alternatives or not.
        for r in &mut requests {
            r.params.logprobs.get_or_insert(0);
        }
    }
    let completions = model.engine.generate(requests)?;
    for (prompt, done) in prompts.iter().zip(&completions) {
        let ids = done.token_ids();
        let text = tokenizer.decode(&ids, true)?;
        if args.json {
            let logprobs: Vec<Option<f32>> = done.tokens.iter().map(|t| t.logprob).collect();
            let line = serde_json::json!({
                "prompt": prompt,
                "text": text,
                "token_ids": ids,
                "logprobs": logprobs,
                "finish_reason": done.finish_reason.as_str(),
                "prompt_tokens": done.prompt_tokens,
            });
            println!("{line}");
        } else {
            println!("=== {prompt}\n{text}");
        }
    }
    Ok(())
}
