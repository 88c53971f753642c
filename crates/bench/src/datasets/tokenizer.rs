//! The model's tokenizer, borrowed from the server through `POST /tokenize` and `/detokenize`.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use crate::load::target_server::TargetServer;

/// Counts and builds token sequences with the server's own tokenizer.
#[derive(Clone, Debug)]
pub struct ServerTokenizer {
    server: TargetServer,
    model: String,
}

impl ServerTokenizer {
    /// The tokenizer when the server offers `/tokenize`, `None` when it does not.
    pub async fn probe(server: &TargetServer, model: &str) -> Option<Self> {
        let tokenizer = ServerTokenizer {
            server: server.clone(),
            model: model.to_owned(),
        };
        match tokenizer.tokenize("Hello world").await {
            Ok(tokens) if !tokens.is_empty() => Some(tokenizer),
            _ => None,
        }
    }

    /// Token ids of `text`, without special tokens: the server adds those itself when serving.
    pub async fn tokenize(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        // vLLM and tokenmill read "prompt" and "add_special_tokens"; llama-server reads
        // "content" and "add_special". Each ignores the other's fields.
        let body = json!({
            "model": self.model,
            "prompt": text,
            "add_special_tokens": false,
            "content": text,
            "add_special": false,
        });
        let reply = self.post("/tokenize", &body).await?;
        serde_json::from_value(reply["tokens"].clone())
            .context("/tokenize answered without a \"tokens\" list")
    }

    pub async fn detokenize(&self, tokens: &[u32]) -> anyhow::Result<String> {
        let body = json!({ "model": self.model, "tokens": tokens });
        let reply = self.post("/detokenize", &body).await?;
        // vLLM answers with "prompt", llama-server with "content".
        reply["prompt"]
            .as_str()
            .or_else(|| reply["content"].as_str())
            .map(str::to_owned)
            .ok_or_else(|| anyhow::anyhow!("/detokenize answered without a \"prompt\" string"))
    }

    async fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<serde_json::Value> {
        let url = self.server.url(path);
        let response = self
            .server
            .http()
            .post(&url)
            .json(body)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .with_context(|| format!("POST {url} failed"))?;
        let status = response.status();
        if !status.is_success() {
            anyhow::bail!("POST {url} answered {status}");
        }
        response
            .json()
            .await
            .with_context(|| format!("POST {url} did not answer JSON"))
    }
}
