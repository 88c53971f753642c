//! One configuration `tune` ran: its flags, and what its `bench serve` run measured against
//! the objectives, or why it could not run.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::benchmark_result::BenchmarkResult;
use crate::tune::search::Score;
use crate::tune::slos::{p99, TuneMetric, TuneSlos};

/// The numbers `tune` compares configurations by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measurement {
    pub ttft_p99_ms: f64,
    pub tpot_p99_ms: f64,
    pub itl_p99_ms: f64,
    pub output_throughput: f64,
    pub request_throughput: f64,
    /// Requests per second that met every objective.
    pub goodput: f64,
    pub completed: usize,
    pub failed: usize,
    /// Per objective, whether the run's P99 stayed within it.
    pub met: BTreeMap<TuneMetric, bool>,
    /// Every objective met, by a run in which some request succeeded.
    pub meets_every_slo: bool,
}

impl Measurement {
    pub fn of(result: &BenchmarkResult, slos: &TuneSlos) -> Self {
        let met: BTreeMap<TuneMetric, bool> = slos
            .0
            .iter()
            .map(|slo| (slo.metric, slo.metric.p99_ms(result) <= slo.limit_ms))
            .collect();
        Measurement {
            ttft_p99_ms: p99(&result.ttft),
            tpot_p99_ms: p99(&result.tpot),
            itl_p99_ms: p99(&result.itl),
            output_throughput: result.output_throughput,
            request_throughput: result.request_throughput,
            goodput: slos.goodput(result),
            completed: result.completed,
            failed: result.failed,
            // With nothing completed every P99 reads zero, which proves nothing.
            meets_every_slo: result.completed > 0 && met.values().all(|&m| m),
            met,
        }
    }

    pub fn p99_ms(&self, metric: TuneMetric) -> f64 {
        match metric {
            TuneMetric::Ttft => self.ttft_p99_ms,
            TuneMetric::Tpot => self.tpot_p99_ms,
            TuneMetric::Itl => self.itl_p99_ms,
        }
    }
}

/// One configuration and its outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TuneTrial {
    /// File-name-safe, e.g. `max-num-batched-tokens-256_max-num-seqs-32`.
    pub name: String,
    /// Server flag (without dashes) → value.
    pub settings: BTreeMap<String, f64>,
    /// The flags as passed to the server.
    pub flags: String,
    /// The whole server command.
    pub command: String,
    /// `None` when the run failed; `error` then says why.
    pub measurement: Option<Measurement>,
    pub error: Option<String>,
}

impl TuneTrial {
    pub fn score(&self) -> Score {
        self.measurement.as_ref().map_or(Score::FAILED, |m| Score {
            meets_every_slo: m.meets_every_slo,
            goodput: m.goodput,
            output_throughput: m.output_throughput,
        })
    }
}
