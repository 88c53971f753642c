//! Several servers' sweeps side by side: the Markdown table with each server's medians per
//! level and their ratios to the first server.

use std::fmt::Write as _;

use serde::Serialize;

use crate::sweep::summary::{LevelSummary, SweepAxis, SweepSummary, CLASS_COLUMNS, TABLE_COLUMNS};

/// One server's sweep under the name it was given on the command line.
#[derive(Clone, Debug, Serialize)]
pub struct ServerSweep {
    pub name: String,
    pub summary: SweepSummary,
}

/// The comparison as saved in comparison.json; the first server is the baseline of every ratio.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub axis: SweepAxis,
    pub runs_per_level: usize,
    pub servers: Vec<ServerSweep>,
}

impl Comparison {
    /// Groups sweeps that ran the same levels; the first one is the baseline.
    pub fn new(servers: Vec<ServerSweep>) -> anyhow::Result<Self> {
        let first = servers
            .first()
            .ok_or_else(|| anyhow::anyhow!("a comparison needs at least one server"))?;
        let (axis, runs_per_level) = (first.summary.axis, first.summary.runs_per_level);
        let levels = level_values(&first.summary);
        if let Some(odd) = servers.iter().find(|s| level_values(&s.summary) != levels) {
            anyhow::bail!(
                "{} ran other levels than {}; sweeps compare only level by level",
                odd.name,
                first.name
            );
        }
        Ok(Comparison {
            axis,
            runs_per_level,
            servers,
        })
    }

    /// One row per level and metric: every server's median, then each later server's ratio
    /// to the first (`2.00×` means twice the first server's value). When the runs had short
    /// and long prompts, the per-class latencies get rows too.
    pub fn markdown_table(&self) -> String {
        let names: Vec<&str> = self.servers.iter().map(|s| s.name.as_str()).collect();
        let baseline = names[0];
        let mut out = format!("| {} | Metric |", self.axis.title());
        let mut rule = String::from("|---:|---|");
        for name in &names {
            let _ = write!(out, " {name} |");
            rule.push_str("---:|");
        }
        for name in &names[1..] {
            let _ = write!(out, " {name} / {baseline} |");
            rule.push_str("---:|");
        }
        let _ = writeln!(out, "\n{rule}");
        let classes = self.servers.iter().any(|s| s.summary.has_classes());
        let class_columns: &[(&str, &str)] = if classes { &CLASS_COLUMNS } else { &[] };
        for (index, level) in self.servers[0].summary.levels.iter().enumerate() {
            for (heading, key) in TABLE_COLUMNS.iter().chain(class_columns) {
                out.push_str(&self.row(index, level.level, heading, key));
            }
        }
        let models: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("{} `{}`", s.name, s.summary.model_id))
            .collect();
        let _ = writeln!(
            out,
            "\nMedians over {} runs per level and server; ratios divide each server's median by \
             {baseline}'s. Models: {}.",
            self.runs_per_level,
            models.join(", ")
        );
        out
    }

    fn row(&self, index: usize, level: f64, heading: &str, key: &str) -> String {
        let medians: Vec<f64> = self
            .servers
            .iter()
            .map(|s| level_at(&s.summary, index).median(key))
            .collect();
        let mut row = format!("| {level} | {heading} |");
        for value in &medians {
            let _ = write!(row, " {value:.1} |");
        }
        for value in &medians[1..] {
            let _ = write!(row, " {} |", ratio(*value, medians[0]));
        }
        row.push('\n');
        row
    }
}

fn level_values(summary: &SweepSummary) -> Vec<f64> {
    summary.levels.iter().map(|l| l.level).collect()
}

/// `new` checked that every sweep has the same levels in the same order.
fn level_at(summary: &SweepSummary, index: usize) -> &LevelSummary {
    &summary.levels[index]
}

/// A dash when the baseline is zero: a server that produced nothing has no meaningful ratio.
fn ratio(value: f64, baseline: f64) -> String {
    if baseline > 0.0 {
        format!("{:.2}×", value / baseline)
    } else {
        "–".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sweep(name: &str, levels: &[(f64, f64, f64)]) -> ServerSweep {
        let levels = levels
            .iter()
            .map(|&(level, ttft, throughput)| {
                let run = json!({"median_ttft_ms": ttft, "median_tpot_ms": ttft / 10.0,
                                 "p99_itl_ms": ttft / 5.0, "output_throughput": throughput});
                LevelSummary::from_runs(level, &[run]).unwrap()
            })
            .collect();
        ServerSweep {
            name: name.to_owned(),
            summary: SweepSummary {
                axis: SweepAxis::Concurrency,
                model_id: format!("{name}-model"),
                backend: "openai".into(),
                runs_per_level: 1,
                levels,
            },
        }
    }

    #[test]
    fn each_level_and_metric_gets_a_row_with_the_ratio_to_the_first_server() {
        let comparison = Comparison::new(vec![
            sweep("llama-server", &[(1.0, 400.0, 50.0), (64.0, 20000.0, 30.0)]),
            sweep("tokenmill", &[(1.0, 300.0, 45.0), (64.0, 12000.0, 105.0)]),
        ])
        .unwrap();
        let table = comparison.markdown_table();
        assert!(
            table.starts_with(
                "| Users at the same time | Metric | llama-server | tokenmill | tokenmill / llama-server |\n\
                 |---:|---|---:|---:|---:|\n"
            ),
            "{table}"
        );
        for row in [
            "| 1 | Median TTFT (ms) | 400.0 | 300.0 | 0.75× |",
            "| 1 | Median TPOT (ms) | 40.0 | 30.0 | 0.75× |",
            "| 1 | Output tokens per second | 50.0 | 45.0 | 0.90× |",
            "| 64 | P99 ITL (ms) | 4000.0 | 2400.0 | 0.60× |",
            "| 64 | Output tokens per second | 30.0 | 105.0 | 3.50× |",
        ] {
            assert!(table.contains(row), "missing {row:?} in\n{table}");
        }
        assert_eq!(table.lines().filter(|l| l.starts_with("| 64 |")).count(), 4);
        assert!(table.contains("llama-server `llama-server-model`, tokenmill `tokenmill-model`"));
    }

    #[test]
    fn per_class_latencies_get_rows_when_the_runs_had_them() {
        let mut servers = vec![
            sweep("a", &[(1.0, 10.0, 5.0)]),
            sweep("b", &[(1.0, 20.0, 5.0)]),
        ];
        let plain = Comparison::new(servers.clone()).unwrap().markdown_table();
        assert!(!plain.contains("Short median TTFT"), "{plain}");
        for (server, short) in servers.iter_mut().zip([400.0, 100.0]) {
            let run = json!({"median_ttft_ms": 10.0,
                "ttft_by_class": {"short": {"median_ms": short}, "long": {"median_ms": 3000.0}}});
            server.summary.levels = vec![LevelSummary::from_runs(1.0, &[run]).unwrap()];
        }
        let table = Comparison::new(servers).unwrap().markdown_table();
        for row in [
            "| 1 | Short median TTFT (ms) | 400.0 | 100.0 | 0.25× |",
            "| 1 | Long median TTFT (ms) | 3000.0 | 3000.0 | 1.00× |",
        ] {
            assert!(table.contains(row), "missing {row:?} in\n{table}");
        }
    }

    #[test]
    fn a_baseline_of_zero_gives_a_dash_instead_of_a_ratio() {
        let comparison = Comparison::new(vec![
            sweep("a", &[(1.0, 0.0, 0.0)]),
            sweep("b", &[(1.0, 10.0, 5.0)]),
        ])
        .unwrap();
        assert!(comparison
            .markdown_table()
            .contains("| 1 | Median TTFT (ms) | 0.0 | 10.0 | – |"));
    }

    #[test]
    fn sweeps_over_different_levels_are_refused() {
        let result = Comparison::new(vec![
            sweep("a", &[(1.0, 10.0, 5.0)]),
            sweep("b", &[(4.0, 10.0, 5.0)]),
        ]);
        assert!(result.unwrap_err().to_string().contains("other levels"));
    }
}
