//! Results of a sweep: per level, the lowest, median and highest value of every metric over
//! the runs, and the Markdown table comparing levels.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::distribution::percentile;

/// Result fields that restate the settings rather than measure anything.
const SETTINGS_FIELDS: [&str; 4] = [
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
];

/// What a sweep varies between levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepAxis {
    Concurrency,
    RequestRate,
}

impl SweepAxis {
    pub fn title(self) -> &'static str {
        match self {
            SweepAxis::Concurrency => "Users at the same time",
            SweepAxis::RequestRate => "Requests per second",
        }
    }
}

/// The spread of one metric over a level's runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread {
            min: sorted[0],
            median: percentile(&sorted, 50.0),
            max: sorted[sorted.len() - 1],
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LevelSummary {
    pub level: f64,
    pub runs: usize,
    pub metrics: BTreeMap<String, Spread>,
}

/// The sweep as saved in summary.json.
#[derive(Clone, Debug, Serialize)]
pub struct SweepSummary {
    pub axis: SweepAxis,
    pub model_id: String,
    pub backend: String,
    pub runs_per_level: usize,
    pub levels: Vec<LevelSummary>,
}

impl LevelSummary {
    /// Summarises the saved result JSONs of one level's runs: every numeric field is a metric.
    pub fn from_runs(level: f64, runs: &[serde_json::Value]) -> anyhow::Result<Self> {
        if runs.is_empty() {
            anyhow::bail!("level {level} has no runs");
        }
        let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for run in runs {
            let fields = run
                .as_object()
                .ok_or_else(|| anyhow::anyhow!("a run result is not a JSON object"))?;
            for (key, value) in fields {
                if let (Some(number), false) =
                    (value.as_f64(), SETTINGS_FIELDS.contains(&key.as_str()))
                {
                    values.entry(key.clone()).or_default().push(number);
                }
            }
        }
        let metrics = values
            .into_iter()
            .map(|(key, v)| (key, Spread::of(&v)))
            .collect();
        Ok(LevelSummary {
            level,
            runs: runs.len(),
            metrics,
        })
    }

    /// The median over runs of one metric; zero when a run never reported it.
    pub fn median(&self, metric: &str) -> f64 {
        self.metrics.get(metric).map_or(0.0, |spread| spread.median)
    }

    pub fn spread(&self, metric: &str) -> Spread {
        self.metrics.get(metric).copied().unwrap_or(Spread {
            min: 0.0,
            median: 0.0,
            max: 0.0,
        })
    }
}

/// The metrics a table shows: heading and metric key. `bench compare` shows the same ones.
pub(crate) const TABLE_COLUMNS: [(&str, &str); 4] = [
    ("Median TTFT (ms)", "median_ttft_ms"),
    ("Median TPOT (ms)", "median_tpot_ms"),
    ("P99 ITL (ms)", "p99_itl_ms"),
    ("Output tokens per second", "output_throughput"),
];

impl SweepSummary {
    /// A Markdown table, one row per level, each value followed by its ratio to the first level.
    pub fn markdown_table(&self) -> String {
        let mut out = format!("| {} |", self.axis.title());
        let mut rule = String::from("|---:|");
        for (heading, _) in TABLE_COLUMNS {
            let _ = write!(out, " {heading} |");
            rule.push_str("---:|");
        }
        let _ = writeln!(out, "\n{rule}");
        let first = self.levels.first();
        for level in &self.levels {
            let _ = write!(out, "| {} |", level.level);
            for (_, key) in TABLE_COLUMNS {
                let value = level.median(key);
                let base = first.map_or(0.0, |f| f.median(key));
                let ratio = if base > 0.0 {
                    format!("{:.2}×", value / base)
                } else {
                    "–".to_owned()
                };
                let _ = write!(out, " {value:.1} ({ratio}) |");
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\nMedians over {} runs per level; ratios to the first level.",
            self.runs_per_level
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(ttft: f64, throughput: f64) -> serde_json::Value {
        json!({"median_ttft_ms": ttft, "median_tpot_ms": 10.0, "p99_itl_ms": 12.0,
               "output_throughput": throughput, "num_prompts": 8, "model_id": "m"})
    }

    #[test]
    fn spread_keeps_lowest_median_and_highest_run() {
        let level =
            LevelSummary::from_runs(4.0, &[run(30.0, 100.0), run(10.0, 300.0), run(20.0, 200.0)])
                .unwrap();
        assert_eq!(
            level.spread("median_ttft_ms"),
            Spread {
                min: 10.0,
                median: 20.0,
                max: 30.0
            }
        );
        assert!(
            !level.metrics.contains_key("num_prompts"),
            "settings are not metrics"
        );
        assert!(!level.metrics.contains_key("model_id"));
    }

    #[test]
    fn table_rows_carry_ratios_to_the_first_level() {
        let summary = SweepSummary {
            axis: SweepAxis::Concurrency,
            model_id: "m".into(),
            backend: "openai".into(),
            runs_per_level: 1,
            levels: vec![
                LevelSummary::from_runs(1.0, &[run(10.0, 100.0)]).unwrap(),
                LevelSummary::from_runs(4.0, &[run(25.0, 350.0)]).unwrap(),
            ],
        };
        let table = summary.markdown_table();
        assert!(
            table.starts_with("| Users at the same time | Median TTFT (ms) |"),
            "{table}"
        );
        assert!(
            table.contains("| 4 | 25.0 (2.50×) | 10.0 (1.00×) | 12.0 (1.00×) | 350.0 (3.50×) |"),
            "{table}"
        );
    }
}
