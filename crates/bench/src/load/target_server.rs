//! `TargetServer`: the server under test — its URLs, the shared HTTP client and model discovery.

use std::time::Duration;

use anyhow::Context;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};

use crate::load::endpoint::Endpoint;

/// An OpenAI-compatible server reached over plain HTTP.
#[derive(Clone, Debug)]
pub struct TargetServer {
    base_url: String,
    http: reqwest::Client,
}

impl TargetServer {
    /// `api_key`, when given, goes with every request (model discovery and `/tokenize` too).
    pub fn new(base_url: &str, api_key: Option<&str>) -> anyhow::Result<Self> {
        let base_url = normalize_base_url(base_url)?;
        let mut headers = HeaderMap::new();
        if let Some(key) = api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .context("--api-key must be printable ASCII, as an HTTP header is")?;
            // Kept out of debug output and logs.
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            // An http_proxy in the environment must not sit between us and a local server.
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(usize::MAX)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(TargetServer { base_url, http })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    pub fn generation_url(&self, endpoint: Endpoint) -> String {
        match endpoint {
            Endpoint::Completions => self.url("/v1/completions"),
            Endpoint::Chat => self.url("/v1/chat/completions"),
        }
    }

    /// The body of `GET /metrics`, or `None` when the server has none (llama-server without
    /// `--metrics`) or does not answer: the figures it would give are then left out.
    pub async fn metrics_text(&self) -> Option<String> {
        let response = self
            .http
            .get(self.url("/metrics"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.text().await.ok()
    }

    /// The first model listed by `GET /v1/models`.
    pub async fn first_model(&self) -> anyhow::Result<String> {
        let url = self.url("/v1/models");
        let response = self
            .http
            .get(&url)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .with_context(|| format!("cannot reach {url}; is the server running?"))?;
        let status = response.status();
        if !status.is_success() {
            anyhow::bail!("GET {url} answered {status}; pass --model explicitly");
        }
        let body: serde_json::Value = response
            .json()
            .await
            .with_context(|| format!("GET {url} did not answer JSON"))?;
        body["data"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow::anyhow!("GET {url} listed no model; pass --model explicitly"))
    }
}

fn normalize_base_url(base_url: &str) -> anyhow::Result<String> {
    let trimmed = base_url.trim().trim_end_matches('/');
    if !trimmed.starts_with("http://") && !trimmed.starts_with("https://") {
        anyhow::bail!("--base-url must start with http://, got {base_url:?}");
    }
    // Accept the OpenAI-style ".../v1" too, since the routes below add it themselves.
    Ok(trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_loses_trailing_slash_and_v1() {
        assert_eq!(normalize_base_url("http://h:1/v1/").unwrap(), "http://h:1");
        assert_eq!(normalize_base_url("http://h:1").unwrap(), "http://h:1");
    }

    #[test]
    fn base_url_without_scheme_is_rejected() {
        assert!(normalize_base_url("127.0.0.1:8000").is_err());
    }
}
