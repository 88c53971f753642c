//! Results of a sweep: per level, the lowest, median and highest value of every metric over
//! the runs, and the Markdown table comparing levels.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::report::distribution::percentile;

/// Result fields that restate the settings rather than measure anything.
const SETTINGS_FIELDS: [&str; 5] = [
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "long_prompt_threshold",
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
    /// Summarises the saved result JSONs of one level's runs: every numeric field is a
    /// metric, and so is every number inside an object, named by its path
    /// (`ttft_by_class.short.median_ms`).
    pub fn from_runs(level: f64, runs: &[serde_json::Value]) -> anyhow::Result<Self> {
        if runs.is_empty() {
            anyhow::bail!("level {level} has no runs");
        }
        let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for run in runs {
            let fields = run
                .as_object()
                .ok_or_else(|| anyhow::anyhow!("a run result is not a JSON object"))?;
            collect_numbers("", fields, &mut values);
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

    /// Whether the runs reported latencies per prompt-length class.
    pub fn has_classes(&self) -> bool {
        CLASS_COLUMNS
            .iter()
            .any(|(_, key)| self.metrics.contains_key(*key))
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

/// Adds the numbers of `fields` to `values`, descending into objects with dotted names.
fn collect_numbers(
    prefix: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
    values: &mut BTreeMap<String, Vec<f64>>,
) {
    for (key, value) in fields {
        let name = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if let Some(inner) = value.as_object() {
            collect_numbers(&name, inner, values);
        } else if let (Some(number), false) =
            (value.as_f64(), SETTINGS_FIELDS.contains(&name.as_str()))
        {
            values.entry(name).or_default().push(number);
        }
    }
}

/// The per-class metrics a table shows when runs had both short and long prompts.
pub(crate) const CLASS_COLUMNS: [(&str, &str); 6] = [
    ("Short median TTFT (ms)", "ttft_by_class.short.median_ms"),
    ("Short P99 TTFT (ms)", "ttft_by_class.short.p99_ms"),
    ("Short max TTFT (ms)", "ttft_by_class.short.max_ms"),
    ("Short median E2EL (ms)", "e2el_by_class.short.median_ms"),
    ("Long median TTFT (ms)", "ttft_by_class.long.median_ms"),
    ("Long median E2EL (ms)", "e2el_by_class.long.median_ms"),
];

/// The metrics a table shows: heading and metric key. `bench compare` shows the same ones.
pub(crate) const TABLE_COLUMNS: [(&str, &str); 4] = [
    ("Median TTFT (ms)", "median_ttft_ms"),
    ("Median TPOT (ms)", "median_tpot_ms"),
    ("P99 ITL (ms)", "p99_itl_ms"),
    ("Output tokens per second", "output_throughput"),
];

impl SweepSummary {
    /// A Markdown table, one row per level, each value followed by its ratio to the first level;
    /// when the runs had short and long prompts, a second one with the per-class latencies.
    pub fn markdown_table(&self) -> String {
        let mut out = self.table_of(&TABLE_COLUMNS);
        let _ = writeln!(
            out,
            "\nMedians over {} runs per level; ratios to the first level.",
            self.runs_per_level
        );
        if self.has_classes() {
            out.push('\n');
            out.push_str(&self.table_of(&CLASS_COLUMNS));
            let _ = writeln!(
                out,
                "\nPer prompt-length class (each run's median, P99 and max of that class), \
                 medians over runs."
            );
        }
        out
    }

    /// Whether any level's runs reported latencies per prompt-length class.
    pub fn has_classes(&self) -> bool {
        self.levels.iter().any(LevelSummary::has_classes)
    }

    fn table_of(&self, columns: &[(&str, &str)]) -> String {
        let mut out = format!("| {} |", self.axis.title());
        let mut rule = String::from("|---:|");
        for (heading, _) in columns {
            let _ = write!(out, " {heading} |");
            rule.push_str("---:|");
        }
        let _ = writeln!(out, "\n{rule}");
        let first = self.levels.first();
        for level in &self.levels {
            let _ = write!(out, "| {} |", level.level);
            for (_, key) in columns {
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
    fn numbers_inside_objects_become_metrics_named_by_their_path() {
        let with_classes = |short: f64| {
            json!({"median_ttft_ms": 5.0, "long_prompt_threshold": 8000,
                   "ttft_by_class": {"short": {"median_ms": short, "max_ms": short * 2.0},
                                     "long": {"median_ms": 3000.0}}})
        };
        let level = LevelSummary::from_runs(
            1.0,
            &[
                with_classes(100.0),
                with_classes(300.0),
                with_classes(200.0),
            ],
        )
        .unwrap();
        assert_eq!(
            level.spread("ttft_by_class.short.median_ms"),
            Spread {
                min: 100.0,
                median: 200.0,
                max: 300.0
            }
        );
        assert_eq!(level.median("ttft_by_class.short.max_ms"), 400.0);
        assert!(level.has_classes());
        assert!(!level.metrics.contains_key("long_prompt_threshold"));
        let plain = LevelSummary::from_runs(1.0, &[run(1.0, 1.0)]).unwrap();
        assert!(!plain.has_classes());
    }

    #[test]
    fn a_second_table_shows_the_classes_when_runs_had_them() {
        let classes = json!({"median_ttft_ms": 5.0,
            "ttft_by_class": {"short": {"median_ms": 120.0, "p99_ms": 150.0, "max_ms": 160.0},
                              "long": {"median_ms": 3000.0}},
            "e2el_by_class": {"short": {"median_ms": 130.0}, "long": {"median_ms": 3500.0}}});
        let mut summary = SweepSummary {
            axis: SweepAxis::RequestRate,
            model_id: "m".into(),
            backend: "openai".into(),
            runs_per_level: 1,
            levels: vec![LevelSummary::from_runs(2.0, &[classes]).unwrap()],
        };
        let table = summary.markdown_table();
        assert!(
            table.contains(
                "| 2 | 120.0 (1.00×) | 150.0 (1.00×) | 160.0 (1.00×) | 130.0 (1.00×) | \
                 3000.0 (1.00×) | 3500.0 (1.00×) |"
            ),
            "{table}"
        );
        assert!(table.contains("| Short median TTFT (ms) |"), "{table}");
        summary.levels = vec![LevelSummary::from_runs(2.0, &[run(1.0, 1.0)]).unwrap()];
        assert!(!summary.markdown_table().contains("Short median TTFT"));
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
