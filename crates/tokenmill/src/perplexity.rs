//! `tokenmill perplexity`: a text's perplexity under the model, computed the way llama.cpp's
//! `llama-perplexity` computes it, so that the two can be compared on the same tokens.
//!
//! The method (llama.cpp `tools/perplexity`, its default mode): the whole text is tokenized
//! once, with BOS where the tokenizer adds one; it is cut into chunks of `--ctx-size` tokens
//! (a partial last chunk is dropped); each chunk runs alone from an empty cache, its first
//! token replaced by BOS; only the second half of a chunk is scored (every token there has at
//! least half a context before it): the logits at positions `ctx/2 ..= ctx-2` against the
//! tokens after them, `ctx - ctx/2 - 1` tokens a chunk. The estimate is `exp` of the mean
//! negative log-likelihood over every scored token, with its standard error.

use anyhow::{bail, ensure, Context};
use clap::Args;
use std::path::PathBuf;
use tokenmill_engine::{EngineArgs, Request, SamplingParams};
use tokenmill_server::model::model_loader;
use tokenmill_server::model::model_text_args::ModelTextArgs;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub text: ModelTextArgs,
    /// The text to score (UTF-8). One trailing newline is dropped, as llama.cpp's `-f` does.
    #[arg(long)]
    pub file: PathBuf,
    /// Tokens a chunk (llama-perplexity's `-c`); the second half of each chunk is scored.
    #[arg(long, default_value_t = 512)]
    pub ctx_size: usize,
    /// Score only the first this many chunks (llama-perplexity's `--chunks`). [all]
    #[arg(long)]
    pub chunks: Option<usize>,
}

/// The smallest chunk with a token to score: two of context, one scored after them.
const MIN_CTX_SIZE: usize = 4;

/// The text's tokens cut into the chunks llama-perplexity evaluates.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunks {
    pub ctx_size: usize,
    pub chunks: Vec<Vec<u32>>,
}

impl Chunks {
    /// Cuts `tokens` into whole chunks of `ctx_size`, each starting with `bos` where the
    /// tokenizer adds one (llama.cpp overwrites the chunk's first token, which the text then
    /// never scores: it is context of nothing). Refuses a text shorter than two chunks, as
    /// llama-perplexity does.
    pub fn cut(
        tokens: &[u32],
        ctx_size: usize,
        bos: Option<u32>,
        max_chunks: Option<usize>,
    ) -> anyhow::Result<Self> {
        ensure!(
            ctx_size >= MIN_CTX_SIZE,
            "--ctx-size {ctx_size} is too small: a chunk needs at least {MIN_CTX_SIZE} tokens \
             (its first half is context, its second half is scored)"
        );
        ensure!(
            tokens.len() >= 2 * ctx_size,
            "the text has {} tokens; a context of {ctx_size} needs at least {} (two chunks)",
            tokens.len(),
            2 * ctx_size
        );
        let whole = tokens.len() / ctx_size;
        let n = max_chunks.map_or(whole, |m| m.min(whole));
        ensure!(n > 0, "--chunks 0 leaves nothing to score");
        let chunks = tokens
            .chunks_exact(ctx_size)
            .take(n)
            .map(|chunk| {
                let mut chunk = chunk.to_vec();
                if let Some(bos) = bos {
                    chunk[0] = bos;
                }
                chunk
            })
            .collect();
        Ok(Self { ctx_size, chunks })
    }

    /// The first prompt position whose logits are scored (llama.cpp's `first`).
    pub fn first_scored_logits(&self) -> usize {
        self.ctx_size / 2
    }

    /// Of a chunk's prompt logprobs (entry `j` scores the token at position `j + 1`), the
    /// ones llama-perplexity scores: the tokens at positions `ctx/2 + 1 ..= ctx - 1`.
    pub fn scored<'a>(&self, prompt_logprobs: &'a [f32]) -> anyhow::Result<&'a [f32]> {
        ensure!(
            prompt_logprobs.len() == self.ctx_size - 1,
            "a chunk of {} tokens came back with {} prompt logprobs, expected {}",
            self.ctx_size,
            prompt_logprobs.len(),
            self.ctx_size - 1
        );
        Ok(&prompt_logprobs[self.first_scored_logits()..])
    }
}

/// Running sums of the negative log-likelihood over scored tokens.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Perplexity {
    nll: f64,
    nll2: f64,
    count: usize,
}

/// The perplexity and its standard error, as llama-perplexity prints its final estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub ppl: f64,
    /// `None` with fewer than two scored tokens, or no spread.
    pub std_error: Option<f64>,
    pub tokens: usize,
}

impl Perplexity {
    pub fn add(&mut self, logprob: f32) {
        let nll = -f64::from(logprob);
        self.nll += nll;
        self.nll2 += nll * nll;
        self.count += 1;
    }

    /// `None` before any token is scored.
    pub fn estimate(&self) -> Option<Estimate> {
        if self.count == 0 {
            return None;
        }
        let n = self.count as f64;
        let mean = self.nll / n;
        let ppl = mean.exp();
        // The standard error of the mean NLL, carried to the perplexity (d exp(x) = exp(x) dx).
        let variance = self.nll2 / n - mean * mean;
        let std_error =
            (variance > 0.0 && self.count > 1).then(|| (variance / (n - 1.0)).sqrt() * ppl);
        Some(Estimate {
            ppl,
            std_error,
            tokens: self.count,
        })
    }
}

/// Reads the text as llama.cpp's `-f` does: the file whole, less one trailing newline.
fn read_text(path: &std::path::Path) -> anyhow::Result<String> {
    let mut text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --file {}", path.display()))?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

pub fn run(args: PerplexityArgs) -> anyhow::Result<()> {
    let text = read_text(&args.file)?;
    let mut model = model_loader::load_with(&args.engine, &args.text)?;
    let tokenizer = model
        .tokenizer
        .clone()
        .context("this model has no tokenizer (dummy weights): give --tokenizer")?;
    let tokens = tokenizer.encode(&text, true)?;
    // BOS is what the tokenizer put in front, so a tokenizer that adds none gets none.
    let bos = tokenizer
        .bos_token_id()
        .filter(|&bos| tokens.first() == Some(&bos));
    let chunks = Chunks::cut(&tokens, args.ctx_size, bos, args.chunks)?;
    eprintln!(
        "perplexity: {} tokens, {} chunks of {} ({} scored a chunk), BOS {}",
        tokens.len(),
        chunks.chunks.len(),
        chunks.ctx_size,
        chunks.ctx_size - 1 - chunks.first_scored_logits(),
        bos.map_or("none".to_owned(), |b| b.to_string()),
    );
    let requests = chunks
        .chunks
        .iter()
        .map(|chunk| Request {
            prompt: chunk.clone(),
            params: SamplingParams {
                temperature: 0.0,
                max_tokens: 1,
                ignore_eos: true,
                prompt_logprobs: Some(0),
                ..SamplingParams::default()
            },
            priority: 0,
            constraint: None,
        })
        .collect();
    let completions = model.engine.generate(requests)?;
    let mut total = Perplexity::default();
    let mut running = Vec::with_capacity(completions.len());
    for (i, done) in completions.iter().enumerate() {
        let logprobs = done
            .prompt_logprobs
            .iter()
            .map(|t| {
                t.logprob
                    .context("a prompt token came back without its logprob")
            })
            .collect::<anyhow::Result<Vec<f32>>>()?;
        for &logprob in chunks.scored(&logprobs)? {
            total.add(logprob);
        }
        let so_far = total
            .estimate()
            .context("a chunk scores at least one token")?;
        running.push(format!("[{}]{:.4}", i + 1, so_far.ppl));
    }
    println!("{}", running.join(","));
    let Some(estimate) = total.estimate() else {
        bail!("no token was scored");
    };
    match estimate.std_error {
        Some(e) => println!("Final estimate: PPL = {:.4} +/- {:.5}", estimate.ppl, e),
        None => println!("Final estimate: PPL = {:.4}", estimate.ppl),
    }
    eprintln!("perplexity: {} tokens scored", estimate.tokens);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_whole_and_start_with_bos() {
        let tokens: Vec<u32> = (100..111).collect();
        let cut = Chunks::cut(&tokens, 4, Some(1), None).unwrap();
        assert_eq!(
            cut.chunks,
            vec![vec![1, 101, 102, 103], vec![1, 105, 106, 107]]
        );
    }

    #[test]
    fn chunks_keep_their_first_token_when_the_tokenizer_adds_no_bos() {
        let tokens: Vec<u32> = (100..112).collect();
        let cut = Chunks::cut(&tokens, 6, None, None).unwrap();
        assert_eq!(cut.chunks[1], vec![106, 107, 108, 109, 110, 111]);
    }

    #[test]
    fn chunks_stop_at_the_count_asked_for() {
        let tokens: Vec<u32> = (0..40).collect();
        let cut = Chunks::cut(&tokens, 8, Some(1), Some(2)).unwrap();
        assert_eq!(cut.chunks.len(), 2);
    }

    #[test]
    fn a_text_shorter_than_two_chunks_is_refused_with_its_length() {
        let tokens: Vec<u32> = (0..7).collect();
        let error = Chunks::cut(&tokens, 4, None, None).unwrap_err().to_string();
        assert!(
            error.contains("7 tokens") && error.contains("at least 8"),
            "{error}"
        );
    }

    #[test]
    fn a_context_too_small_to_score_is_refused_by_name() {
        let error = Chunks::cut(&[0; 10], 2, None, None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--ctx-size 2"), "{error}");
    }

    #[test]
    fn the_scored_logprobs_are_those_of_the_second_half_after_its_first_token() {
        // Chunk of 8: logprob j scores the token at j + 1; llama.cpp scores positions 5..=7.
        let cut = Chunks::cut(&[0; 16], 8, None, None).unwrap();
        let logprobs = [0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0];
        assert_eq!(cut.scored(&logprobs).unwrap(), &[-4.0, -5.0, -6.0]);
        assert!(cut.scored(&logprobs[1..]).is_err());
    }

    #[test]
    fn uniform_guesses_over_v_tokens_have_perplexity_v() {
        let mut ppl = Perplexity::default();
        for _ in 0..10 {
            ppl.add(-(50.0f32).ln());
        }
        let e = ppl.estimate().unwrap();
        assert!((e.ppl - 50.0).abs() < 1e-3, "{e:?}");
        assert_eq!(e.std_error, None);
        assert_eq!(e.tokens, 10);
    }

    #[test]
    fn the_estimate_is_the_exp_of_the_mean_nll_with_its_standard_error() {
        let mut ppl = Perplexity::default();
        for lp in [-1.0f32, -3.0] {
            ppl.add(lp);
        }
        let e = ppl.estimate().unwrap();
        assert!((e.ppl - 2.0f64.exp()).abs() < 1e-9);
        // NLLs 1 and 3: population variance 1, standard error sqrt(1 / 1) = 1, times ppl.
        assert!((e.std_error.unwrap() - 2.0f64.exp()).abs() < 1e-9);
        assert_eq!(Perplexity::default().estimate(), None);
    }
}
