//! `SpecDecodeReport`: a run's speculative decoding, from the server's `spec_decode` counters
//! read from `/metrics` before and after (vLLM's names under `vllm:`, `tokenmill:` or
//! llama-server's `llamacpp:`) or from the draft counts llama-server puts in each reply's
//! `timings`; and the acceptance figures vLLM derives from them.

use serde_json::{json, Value};

use crate::load::reply_drafts::ReplyDrafts;

/// The metric prefixes whose `spec_decode_*` counters are read, in order of preference: a
/// server exporting several (tokenmill with `--metrics-compat vllm`) is read once, under the
/// first.
const PREFIXES: [&str; 3] = ["vllm:", "tokenmill:", "llamacpp:"];

/// Counters of one `/metrics` scrape, summed over every series of a family (several models or
/// engines), except the per-position one, which is kept per position.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecDecodeCounters {
    /// Verify steps that checked at least one drafted token.
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    /// Accepted tokens by draft position, position 0 first.
    pub accepted_per_pos: Vec<u64>,
}

/// Which family of the metrics text one sample belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Drafts,
    DraftTokens,
    AcceptedTokens,
    AcceptedPerPos,
}

impl Family {
    /// The family of a sample name without its prefix; counters may carry OpenMetrics'
    /// `_total` suffix or not.
    fn of(base: &str) -> Option<Self> {
        let base = base.strip_suffix("_total").unwrap_or(base);
        match base {
            "spec_decode_num_drafts" => Some(Family::Drafts),
            "spec_decode_num_draft_tokens" => Some(Family::DraftTokens),
            "spec_decode_num_accepted_tokens" => Some(Family::AcceptedTokens),
            "spec_decode_num_accepted_tokens_per_pos" => Some(Family::AcceptedPerPos),
            _ => None,
        }
    }
}

/// One sample line of the Prometheus text format: `name{labels} value [timestamp]`.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(String, String)>,
    value: f64,
}

impl<'a> Sample<'a> {
    /// `None` for comments, blank lines and lines that are not a sample.
    fn parse(line: &'a str) -> Option<Self> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
        let (name, rest) = line.split_at(name_end);
        let (labels, rest) = match rest.strip_prefix('{') {
            Some(inside) => parse_labels(inside)?,
            None => (Vec::new(), rest),
        };
        let value = rest.split_whitespace().next()?.parse().ok()?;
        Some(Sample {
            name,
            labels,
            value,
        })
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The `key="value"` pairs after an opening brace, with the text after the closing one;
/// values may hold escaped quotes and backslashes.
fn parse_labels(text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after_key) = rest.split_once('=')?;
        let quoted = after_key.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut escaped = false;
        let mut close = None;
        for (at, c) in quoted.char_indices() {
            if escaped {
                value.push(if c == 'n' { '\n' } else { c });
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                close = Some(at);
                break;
            } else {
                value.push(c);
            }
        }
        labels.push((key.trim().to_owned(), value));
        rest = quoted[close? + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
}

impl SpecDecodeCounters {
    /// The counters of a `/metrics` text, or `None` when it has no `spec_decode` family under
    /// any known prefix (a server without speculation).
    pub fn parse(metrics_text: &str) -> Option<Self> {
        let samples: Vec<Sample> = metrics_text.lines().filter_map(Sample::parse).collect();
        PREFIXES
            .iter()
            .find_map(|prefix| Self::from_samples(&samples, prefix))
    }

    fn from_samples(samples: &[Sample], prefix: &str) -> Option<Self> {
        let mut counters = SpecDecodeCounters::default();
        let mut found = false;
        for sample in samples {
            let Some(family) = sample.name.strip_prefix(prefix).and_then(Family::of) else {
                continue;
            };
            found = true;
            let value = sample.value.max(0.0).round() as u64;
            match family {
                Family::Drafts => counters.num_drafts += value,
                Family::DraftTokens => counters.num_draft_tokens += value,
                Family::AcceptedTokens => counters.num_accepted_tokens += value,
                Family::AcceptedPerPos => {
                    let Some(position) = sample.label("position").and_then(|p| p.parse().ok())
                    else {
                        continue;
                    };
                    let position: usize = position;
                    if counters.accepted_per_pos.len() <= position {
                        counters.accepted_per_pos.resize(position + 1, 0);
                    }
                    counters.accepted_per_pos[position] += value;
                }
            }
        }
        found.then_some(counters)
    }

    /// What the counters grew by since `before`; a counter that went down (a restarted
    /// server) counts from zero.
    pub fn since(&self, before: &SpecDecodeCounters) -> SpecDecodeCounters {
        let grew = |after: u64, before: u64| after.checked_sub(before).unwrap_or(after);
        SpecDecodeCounters {
            num_drafts: grew(self.num_drafts, before.num_drafts),
            num_draft_tokens: grew(self.num_draft_tokens, before.num_draft_tokens),
            num_accepted_tokens: grew(self.num_accepted_tokens, before.num_accepted_tokens),
            accepted_per_pos: self
                .accepted_per_pos
                .iter()
                .enumerate()
                .map(|(i, &after)| {
                    grew(after, before.accepted_per_pos.get(i).copied().unwrap_or(0))
                })
                .collect(),
        }
    }
}

/// Where a run's statistics came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecDecodeSource {
    /// `/metrics` counters, scraped before and after the run.
    Metrics,
    /// Each reply's own `timings`: drafted and accepted tokens, but not the number of drafts.
    ReplyTimings,
}

impl SpecDecodeSource {
    fn name(self) -> &'static str {
        match self {
            SpecDecodeSource::Metrics => "metrics",
            SpecDecodeSource::ReplyTimings => "reply_timings",
        }
    }
}

/// A run's speculative decoding: what was drafted and accepted while it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecDecodeReport {
    pub source: SpecDecodeSource,
    /// Verify steps with drafts; unknown when only replies' timings were available.
    pub num_drafts: Option<u64>,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    pub accepted_per_pos: Vec<u64>,
}

impl SpecDecodeReport {
    /// The run's statistics from counters scraped before and after it.
    pub fn from_counters(before: &SpecDecodeCounters, after: &SpecDecodeCounters) -> Self {
        let grown = after.since(before);
        SpecDecodeReport {
            source: SpecDecodeSource::Metrics,
            num_drafts: Some(grown.num_drafts),
            num_draft_tokens: grown.num_draft_tokens,
            num_accepted_tokens: grown.num_accepted_tokens,
            accepted_per_pos: grown.accepted_per_pos,
        }
    }

    /// The sum of the replies' own counts, or `None` when no reply reported any.
    pub fn from_replies<'a>(replies: impl IntoIterator<Item = &'a ReplyDrafts>) -> Option<Self> {
        let mut total: Option<(u64, u64)> = None;
        for reply in replies {
            let (drafted, accepted) = total.get_or_insert((0, 0));
            *drafted += reply.draft_tokens;
            *accepted += reply.accepted_tokens;
        }
        let (num_draft_tokens, num_accepted_tokens) = total?;
        Some(SpecDecodeReport {
            source: SpecDecodeSource::ReplyTimings,
            num_drafts: None,
            num_draft_tokens,
            num_accepted_tokens,
            accepted_per_pos: Vec::new(),
        })
    }

    /// Accepted over drafted tokens; `None` when nothing was drafted.
    pub fn acceptance_rate(&self) -> Option<f64> {
        (self.num_draft_tokens > 0)
            .then(|| self.num_accepted_tokens as f64 / self.num_draft_tokens as f64)
    }

    /// Tokens a verify step yields on average, as vLLM defines it: the one the target always
    /// gives plus the accepted drafts, `1 + accepted / drafts`; `None` without drafts.
    pub fn mean_acceptance_length(&self) -> Option<f64> {
        let drafts = self.num_drafts.filter(|&n| n > 0)?;
        Some(1.0 + self.num_accepted_tokens as f64 / drafts as f64)
    }

    /// Per draft position, the share of drafts whose token at that position was accepted.
    pub fn acceptance_rate_per_pos(&self) -> Option<Vec<f64>> {
        let drafts = self.num_drafts.filter(|&n| n > 0)?;
        Some(
            self.accepted_per_pos
                .iter()
                .map(|&accepted| accepted as f64 / drafts as f64)
                .collect(),
        )
    }

    /// The `spec_decode` object of the saved result.
    pub fn to_json(&self) -> Value {
        json!({
            "source": self.source.name(),
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "acceptance_rate": self.acceptance_rate(),
            "mean_acceptance_length": self.mean_acceptance_length(),
            "accepted_per_pos": self.accepted_per_pos,
            "acceptance_rate_per_pos": self.acceptance_rate_per_pos(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 160.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 36.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 14.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 20.0
vllm:prompt_tokens_total{model_name="m"} 999.0
"#;

    #[test]
    fn vllm_counters_are_read_with_their_total_suffix_and_positions_in_order() {
        let counters = SpecDecodeCounters::parse(VLLM).expect("the text has spec_decode");
        assert_eq!(
            counters,
            SpecDecodeCounters {
                num_drafts: 40,
                num_draft_tokens: 160,
                num_accepted_tokens: 100,
                accepted_per_pos: vec![36, 30, 20, 14],
            }
        );
    }

    #[test]
    fn counters_without_total_suffix_and_with_a_timestamp_are_read_too() {
        let text = "vllm:spec_decode_num_drafts{model_name=\"a\"} 3 1700000000000\n\
                    vllm:spec_decode_num_drafts{model_name=\"b\"} 4\n\
                    vllm:spec_decode_num_accepted_tokens_per_pos{model_name=\"a\",position=\"0\"} 2\n";
        let counters = SpecDecodeCounters::parse(text).unwrap();
        assert_eq!(counters.num_drafts, 7, "summed over both models");
        assert_eq!(counters.accepted_per_pos, vec![2]);
    }

    #[test]
    fn llama_server_counters_are_read_under_their_prefix() {
        let text = "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n\
                    llamacpp:spec_decode_num_draft_tokens_total 50\n\
                    llamacpp:spec_decode_num_accepted_tokens_total 30\n\
                    llamacpp:spec_decode_num_drafts_total 12\n\
                    llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 11\n\
                    llamacpp:tokens_predicted_total 400\n";
        let counters = SpecDecodeCounters::parse(text).unwrap();
        assert_eq!(
            (
                counters.num_drafts,
                counters.num_draft_tokens,
                counters.num_accepted_tokens
            ),
            (12, 50, 30)
        );
        assert_eq!(counters.accepted_per_pos, vec![11]);
    }

    #[test]
    fn a_server_exporting_two_prefixes_is_read_once_under_vllm_names() {
        let text = "tokenmill:spec_decode_num_drafts_total{model_name=\"m\"} 5\n\
                    vllm:spec_decode_num_drafts_total{model_name=\"m\"} 5\n\
                    tokenmill:spec_decode_num_draft_tokens_total{model_name=\"m\"} 20\n\
                    vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 20\n";
        let counters = SpecDecodeCounters::parse(text).unwrap();
        assert_eq!((counters.num_drafts, counters.num_draft_tokens), (5, 20));
        let native = "tokenmill:spec_decode_num_drafts_total{model_name=\"m\"} 6\n";
        assert_eq!(SpecDecodeCounters::parse(native).unwrap().num_drafts, 6);
    }

    #[test]
    fn a_server_without_spec_decode_families_has_no_counters() {
        let text = "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"m\"} 5\n";
        assert_eq!(SpecDecodeCounters::parse(text), None);
        assert_eq!(SpecDecodeCounters::parse(""), None);
    }

    #[test]
    fn label_values_may_hold_escaped_quotes_commas_and_braces() {
        let text = r#"vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="a \"b\", {c}",position="1"} 9"#;
        let counters = SpecDecodeCounters::parse(text).unwrap();
        assert_eq!(counters.accepted_per_pos, vec![0, 9]);
    }

    #[test]
    fn the_run_counts_what_the_counters_grew_by() {
        let before = SpecDecodeCounters {
            num_drafts: 10,
            num_draft_tokens: 40,
            num_accepted_tokens: 25,
            accepted_per_pos: vec![9, 7],
        };
        let after = SpecDecodeCounters::parse(VLLM).unwrap();
        let stats = SpecDecodeReport::from_counters(&before, &after);
        assert_eq!(stats.num_drafts, Some(30));
        assert_eq!(stats.num_draft_tokens, 120);
        assert_eq!(stats.num_accepted_tokens, 75);
        assert_eq!(stats.accepted_per_pos, vec![27, 23, 20, 14]);
        assert_eq!(stats.acceptance_rate(), Some(0.625));
        assert_eq!(stats.mean_acceptance_length(), Some(3.5));
        let per_pos = stats.acceptance_rate_per_pos().unwrap();
        assert_eq!(per_pos[0], 0.9);
    }

    #[test]
    fn a_counter_that_went_down_counts_from_zero() {
        let before = SpecDecodeCounters {
            num_drafts: 500,
            ..SpecDecodeCounters::default()
        };
        let after = SpecDecodeCounters {
            num_drafts: 8,
            ..SpecDecodeCounters::default()
        };
        assert_eq!(after.since(&before).num_drafts, 8);
    }

    #[test]
    fn no_drafts_give_no_rate_and_no_length() {
        let zero = SpecDecodeCounters::default();
        let stats = SpecDecodeReport::from_counters(&zero, &zero);
        assert_eq!(stats.acceptance_rate(), None);
        assert_eq!(stats.mean_acceptance_length(), None);
        let json = stats.to_json();
        assert!(json["acceptance_rate"].is_null());
        assert_eq!(json["num_drafts"], 0);
    }

    #[test]
    fn reply_timings_give_a_rate_but_no_acceptance_length() {
        let timings: Vec<ReplyDrafts> = [
            json!({"predicted_n": 10, "draft_n": 8, "draft_n_accepted": 6}),
            json!({"predicted_n": 10, "draft_n": 12, "draft_n_accepted": 4}),
        ]
        .iter()
        .filter_map(ReplyDrafts::from_timings)
        .collect();
        let stats = SpecDecodeReport::from_replies(&timings).unwrap();
        assert_eq!(stats.source, SpecDecodeSource::ReplyTimings);
        assert_eq!(
            (stats.num_draft_tokens, stats.num_accepted_tokens),
            (20, 10)
        );
        assert_eq!(stats.acceptance_rate(), Some(0.5));
        assert_eq!(stats.mean_acceptance_length(), None);
        assert_eq!(stats.to_json()["source"], "reply_timings");
        assert_eq!(ReplyDrafts::from_timings(&json!({"predicted_n": 3})), None);
        assert_eq!(SpecDecodeReport::from_replies(&[]), None);
    }
}
