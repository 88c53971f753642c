//! `--save-responses`: each request's prompt and generated text as JSON lines, so the greedy
//! replies of two servers or configurations can be compared prompt by prompt.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::json;

use crate::load::bench_request::{BenchRequest, Prompt};
use crate::report::benchmark_result::BenchmarkResult;

/// One line per request, in dataset order: `index`, `prompt` (text, or the token ids),
/// `text`, `output_tokens` and `error` (null on success).
pub fn lines(requests: &[BenchRequest], result: &BenchmarkResult) -> String {
    let mut out = String::new();
    for (index, request) in requests.iter().enumerate() {
        let prompt = match &request.prompt {
            Prompt::Text(text) => json!(text),
            Prompt::TokenIds(ids) => json!(ids),
        };
        let error = result.errors.get(index).filter(|e| !e.is_empty());
        let line = json!({
            "index": index,
            "prompt": prompt,
            "text": result.generated_texts.get(index),
            "output_tokens": result.output_lens.get(index),
            "error": error,
        });
        let _ = writeln!(out, "{line}");
    }
    out
}

pub fn save(
    requests: &[BenchRequest],
    result: &BenchmarkResult,
    path: &Path,
) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, lines(requests, result))
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::benchmark_result::tests::sample;

    #[test]
    fn each_request_gets_a_line_with_its_prompt_text_and_error() {
        let result = sample(&[]);
        let requests: Vec<BenchRequest> = ["first", "second", "third"]
            .iter()
            .map(|p| BenchRequest {
                prompt: Prompt::Text((*p).into()),
                prompt_len: 1,
                output_len: 4,
            })
            .collect();
        let text = lines(&requests, &result);
        let parsed: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[0]["prompt"], "first");
        assert_eq!(parsed[0]["text"], "xxx");
        assert_eq!(parsed[0]["output_tokens"], 3);
        assert!(parsed[0]["error"].is_null());
        assert_eq!(parsed[2]["index"], 2);
        assert_eq!(parsed[2]["text"], "");
        assert_eq!(parsed[2]["error"], "timed out");
    }
}
