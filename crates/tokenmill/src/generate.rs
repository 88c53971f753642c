//! `tokenmill generate`: offline batch inference — every prompt goes through the engine
//! together, so this is also the simplest way to watch batching work.

use anyhow::{bail, Context};
use clap::Args;
use tokenmill_engine::{EngineArgs, Request, SamplingParams};
use tokenmill_server::chat_template::ChatMessage;
use tokenmill_server::model_loader;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
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

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 0)]
    pub min_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long)]
    pub top_k: Option<usize>,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
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
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            max_tokens: self.max_tokens,
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
    let mut model = model_loader::load(&args.engine)?;
    let tokenizer = model
        .tokenizer
        .clone()
        .context("this model has no tokenizer (dummy weights)")?;
    let mut requests = Vec::with_capacity(prompts.len());
    for prompt in &prompts {
        let text = if args.chat {
            let template = model
                .chat_template
                .as_ref()
                .context("the model has no chat template")?;
            template.render(&[ChatMessage::new("user", prompt.as_str())], true)?
        } else {
            prompt.clone()
        };
        let ids = tokenizer.encode(&text, true)?;
        requests.push(Request {
            prompt: ids,
            params: args.sampling.params(),
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
