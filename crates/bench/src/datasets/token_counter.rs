//! Counts prompt tokens: exactly with the server's tokenizer, or roughly by words without one.

use crate::datasets::tokenizer::ServerTokenizer;
use crate::load::target_server::TargetServer;

/// How prompt lengths are measured.
#[derive(Clone, Debug)]
pub enum TokenCounter {
    Exact(ServerTokenizer),
    /// One whitespace-separated word counted as one token: a guess, announced as such.
    ApproximateWords,
}

impl TokenCounter {
    /// The server's tokenizer when it exposes `/tokenize`, otherwise word counting (with a warning).
    pub async fn for_server(server: &TargetServer, model: &str) -> Self {
        match ServerTokenizer::probe(server, model).await {
            Some(tokenizer) => TokenCounter::Exact(tokenizer),
            None => {
                eprintln!(
                    "warning: {} has no working POST /tokenize; prompt lengths are approximate",
                    server.base_url()
                );
                TokenCounter::ApproximateWords
            }
        }
    }

    pub async fn count(&self, text: &str) -> anyhow::Result<usize> {
        match self {
            TokenCounter::Exact(tokenizer) => Ok(tokenizer.tokenize(text).await?.len()),
            TokenCounter::ApproximateWords => Ok(text.split_whitespace().count()),
        }
    }
}
