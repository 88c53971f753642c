//! What `tune` found: the best configuration, the Pareto frontiers, the search's cost, and
//! every configuration run, as JSON, a Markdown table and one line for the terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::args::TuneSearch;
use crate::tune::pareto_frontier::pareto_frontier;
use crate::tune::search::{self, Score};
use crate::tune::slos::{TuneMetric, TuneSlos};
use crate::tune::space::Point;
use crate::tune::trial::TuneTrial;

/// tune.json.
#[derive(Clone, Debug, Serialize)]
pub struct TuneReport {
    pub slos: TuneSlos,
    pub search: TuneSearch,
    /// Valid configurations in the full grid.
    pub grid_size: usize,
    /// Configurations the search ran.
    pub configurations_run: usize,
    /// Name of the configuration with the highest goodput among those meeting every
    /// objective; `None` when none did.
    pub best: Option<String>,
    /// Per objective's metric: names of the configurations on the frontier of output
    /// throughput against that metric's P99, by rising latency.
    pub pareto: BTreeMap<TuneMetric, Vec<String>>,
    /// In the order run.
    pub configurations: Vec<TuneTrial>,
}

impl TuneReport {
    /// `trials` pairs each configuration's point with its outcome, in the order run.
    pub fn new(
        slos: TuneSlos,
        search: TuneSearch,
        grid_size: usize,
        trials: Vec<(Point, TuneTrial)>,
    ) -> Self {
        let scores: BTreeMap<Point, Score> = trials
            .iter()
            .map(|(point, trial)| (point.clone(), trial.score()))
            .collect();
        let best = search::best(&scores).and_then(|point| {
            let (_, trial) = trials.iter().find(|(p, _)| p == point)?;
            trial
                .measurement
                .as_ref()
                .is_some_and(|m| m.meets_every_slo)
                .then(|| trial.name.clone())
        });
        let configurations: Vec<TuneTrial> = trials.into_iter().map(|(_, t)| t).collect();
        let pareto = slos
            .0
            .iter()
            .map(|slo| (slo.metric, frontier_names(&configurations, slo.metric)))
            .collect();
        TuneReport {
            slos,
            search,
            grid_size,
            configurations_run: configurations.len(),
            best,
            pareto,
            configurations,
        }
    }

    pub fn best_trial(&self) -> Option<&TuneTrial> {
        let name = self.best.as_ref()?;
        self.configurations.iter().find(|t| &t.name == name)
    }

    /// The line printed last: the exact command of the best configuration, or why there is none.
    pub fn best_line(&self) -> String {
        let cost = format!(
            "{} of {} configurations run",
            self.configurations_run, self.grid_size
        );
        match self.best_trial() {
            Some(trial) => {
                let m = trial.measurement.as_ref().expect("the best was measured");
                format!(
                    "best configuration: {} (goodput {:.2} req/s, {:.1} output tok/s; {cost})",
                    trial.command, m.goodput, m.output_throughput
                )
            }
            None => format!("best configuration: none met every objective ({cost})"),
        }
    }

    /// tune.md: the objectives, the search's cost and one row per configuration.
    pub fn markdown_table(&self) -> String {
        let mut out = String::new();
        let objectives: Vec<String> = self
            .slos
            .0
            .iter()
            .map(|s| format!("P99 {} ≤ {} ms", s.metric.name(), s.limit_ms))
            .collect();
        let _ = writeln!(out, "Objectives: {}.", objectives.join(", "));
        let _ = writeln!(
            out,
            "Search: {}, {} of {} configurations run.\n",
            match self.search {
                TuneSearch::Grid => "grid",
                TuneSearch::CoarseToFine => "coarse-to-fine",
            },
            self.configurations_run,
            self.grid_size
        );
        out.push_str("| Configuration | P99 TTFT (ms) | P99 TPOT (ms) | P99 ITL (ms) | Output tok/s | Goodput (req/s) | Meets every objective | Pareto |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|:---:|---|\n");
        for trial in &self.configurations {
            let flags = if trial.flags.is_empty() {
                "(server defaults)"
            } else {
                &trial.flags
            };
            let marker = if self.best.as_ref() == Some(&trial.name) {
                " **best**"
            } else {
                ""
            };
            let _ = write!(out, "| `{flags}`{marker} |");
            match (&trial.measurement, &trial.error) {
                (Some(m), _) => {
                    let _ = write!(
                        out,
                        " {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {} |",
                        m.ttft_p99_ms,
                        m.tpot_p99_ms,
                        m.itl_p99_ms,
                        m.output_throughput,
                        m.goodput,
                        if m.meets_every_slo { "yes" } else { "no" },
                        self.frontiers_of(&trial.name)
                    );
                }
                (None, error) => {
                    let error = error.as_deref().unwrap_or("no result").replace('|', "/");
                    let _ = write!(out, " – | – | – | – | – | no | failed: {error} |");
                }
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\nGoodput: requests per second whose TTFT, TPOT and own P99 inter-token gap met every objective. \
             Pareto: the metrics against which the configuration is on the frontier of output throughput."
        );
        out
    }

    /// The metrics (e.g. `ITL, TTFT`) on whose frontier a configuration lies.
    fn frontiers_of(&self, name: &str) -> String {
        self.pareto
            .iter()
            .filter(|(_, names)| names.iter().any(|n| n == name))
            .map(|(metric, _)| metric.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn frontier_names(trials: &[TuneTrial], metric: TuneMetric) -> Vec<String> {
    let measured: Vec<(&str, (f64, f64))> = trials
        .iter()
        .filter_map(|t| {
            let m = t.measurement.as_ref().filter(|m| m.completed > 0)?;
            Some((t.name.as_str(), (m.p99_ms(metric), m.output_throughput)))
        })
        .collect();
    let points: Vec<(f64, f64)> = measured.iter().map(|(_, p)| *p).collect();
    pareto_frontier(&points)
        .into_iter()
        .map(|i| measured[i].0.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::slos::TuneSlo;
    use crate::tune::trial::Measurement;

    fn trial(name: &str, itl: f64, throughput: f64, goodput: f64, meets: bool) -> TuneTrial {
        TuneTrial {
            name: name.into(),
            settings: BTreeMap::new(),
            flags: format!("--{name}"),
            command: format!("serve --{name}"),
            measurement: Some(Measurement {
                ttft_p99_ms: 100.0,
                tpot_p99_ms: itl,
                itl_p99_ms: itl,
                output_throughput: throughput,
                request_throughput: goodput,
                goodput,
                completed: 10,
                failed: 0,
                met: [(TuneMetric::Itl, meets)].into(),
                meets_every_slo: meets,
            }),
            error: None,
        }
    }

    fn report(trials: Vec<TuneTrial>) -> TuneReport {
        let slos = TuneSlos(vec![TuneSlo {
            metric: TuneMetric::Itl,
            limit_ms: 30.0,
        }]);
        let trials = trials
            .into_iter()
            .enumerate()
            .map(|(i, t)| (vec![i], t))
            .collect();
        TuneReport::new(slos, TuneSearch::Grid, 5, trials)
    }

    #[test]
    fn the_best_meets_every_objective_even_when_a_violator_has_more_goodput() {
        let mut failed = trial("broken", 0.0, 0.0, 0.0, false);
        failed.measurement = None;
        failed.error = Some("exited | early".into());
        let report = report(vec![
            trial("fast", 64.0, 900.0, 9.0, false),
            trial("steady", 16.0, 600.0, 6.0, true),
            trial("slow", 5.0, 300.0, 3.0, true),
            failed,
        ]);
        assert_eq!(report.best.as_deref(), Some("steady"));
        assert_eq!(report.pareto[&TuneMetric::Itl], ["slow", "steady", "fast"]);
        assert!(
            report
                .best_line()
                .starts_with("best configuration: serve --steady (goodput 6.00"),
            "{}",
            report.best_line()
        );
        assert!(report.best_line().ends_with("4 of 5 configurations run)"));
        let table = report.markdown_table();
        assert!(
            table.contains(
                "| `--steady` **best** | 100.0 | 16.0 | 16.0 | 600.0 | 6.00 | yes | ITL |"
            ),
            "{table}"
        );
        assert!(table.contains("failed: exited / early |"), "{table}");
    }

    #[test]
    fn no_best_when_nothing_meets_the_objectives() {
        let report = report(vec![trial("fast", 64.0, 900.0, 9.0, false)]);
        assert_eq!(report.best, None);
        assert!(report.best_line().contains("none met every objective"));
    }
}
