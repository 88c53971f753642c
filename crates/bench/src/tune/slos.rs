//! `tune`'s objectives (`--ttft-p99-ms`, `--tpot-p99-ms`, `--itl-p99-ms`): which a run met,
//! and its goodput, the requests per second that met every one.

use serde::Serialize;

use crate::args::TuneArgs;
use crate::report::benchmark_result::BenchmarkResult;
use crate::report::distribution::{percentile, Distribution};

/// The latency an objective bounds at its 99th percentile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TuneMetric {
    Ttft,
    Tpot,
    Itl,
}

impl TuneMetric {
    pub fn name(self) -> &'static str {
        match self {
            TuneMetric::Ttft => "TTFT",
            TuneMetric::Tpot => "TPOT",
            TuneMetric::Itl => "ITL",
        }
    }

    /// The run's P99 of this metric, in ms.
    pub fn p99_ms(self, result: &BenchmarkResult) -> f64 {
        let distribution = match self {
            TuneMetric::Ttft => &result.ttft,
            TuneMetric::Tpot => &result.tpot,
            TuneMetric::Itl => &result.itl,
        };
        p99(distribution)
    }
}

/// The P99 of a run's distribution; runs made by `tune` always ask for it.
pub fn p99(distribution: &Distribution) -> f64 {
    distribution
        .percentiles
        .iter()
        .find(|(p, _)| *p == 99.0)
        .map_or(0.0, |(_, value)| *value)
}

/// One objective: the metric's P99 must not exceed `limit_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TuneSlo {
    pub metric: TuneMetric,
    pub limit_ms: f64,
}

/// Every objective given, in the order TTFT, TPOT, ITL.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TuneSlos(pub Vec<TuneSlo>);

impl TuneSlos {
    pub fn from_args(args: &TuneArgs) -> anyhow::Result<Self> {
        let given = [
            (TuneMetric::Ttft, args.ttft_p99_ms, "--ttft-p99-ms"),
            (TuneMetric::Tpot, args.tpot_p99_ms, "--tpot-p99-ms"),
            (TuneMetric::Itl, args.itl_p99_ms, "--itl-p99-ms"),
        ];
        let mut slos = Vec::new();
        for (metric, limit, flag) in given {
            let Some(limit_ms) = limit else { continue };
            if !(limit_ms.is_finite() && limit_ms > 0.0) {
                anyhow::bail!("{flag} must be a positive number of ms, got {limit_ms}");
            }
            slos.push(TuneSlo { metric, limit_ms });
        }
        if slos.is_empty() {
            anyhow::bail!("tune needs at least one of --ttft-p99-ms, --tpot-p99-ms, --itl-p99-ms");
        }
        Ok(TuneSlos(slos))
    }

    /// Requests per second that met every objective: each request's TTFT and TPOT (vLLM's
    /// per-request goodput test) and the P99 of its own inter-token gaps, since an ITL
    /// objective has no single per-request value. Failed requests never count.
    pub fn goodput(&self, result: &BenchmarkResult) -> f64 {
        if result.duration_s <= 0.0 {
            return 0.0;
        }
        let good = (0..result.errors.len())
            .filter(|&i| result.errors[i].is_empty())
            .filter(|&i| self.request_meets_all(&RequestTimes::of(result, i)))
            .count();
        good as f64 / result.duration_s
    }

    fn request_meets_all(&self, request: &RequestTimes) -> bool {
        self.0.iter().all(|slo| {
            let value = match slo.metric {
                TuneMetric::Ttft => Some(request.ttft_ms),
                TuneMetric::Tpot => request.tpot_ms,
                TuneMetric::Itl => request.itl_p99_ms,
            };
            // A one-token reply has no TPOT and no gaps, so it cannot miss those objectives.
            value.is_none_or(|v| v <= slo.limit_ms)
        })
    }
}

/// One successful request's latencies, in ms.
struct RequestTimes {
    ttft_ms: f64,
    tpot_ms: Option<f64>,
    itl_p99_ms: Option<f64>,
}

impl RequestTimes {
    fn of(result: &BenchmarkResult, index: usize) -> Self {
        let mut gaps_ms: Vec<f64> = result.itls_s[index].iter().map(|s| s * 1000.0).collect();
        gaps_ms.sort_by(f64::total_cmp);
        let tokens = result.output_lens[index];
        // E2EL − TTFT is the sum of the gaps, so this is TPOT as the run defines it.
        let tpot_ms = (tokens > 1).then(|| gaps_ms.iter().sum::<f64>() / (tokens - 1) as f64);
        RequestTimes {
            ttft_ms: result.ttfts_s[index] * 1000.0,
            tpot_ms,
            itl_p99_ms: (!gaps_ms.is_empty()).then(|| percentile(&gaps_ms, 99.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::benchmark_result::tests::sample;

    fn slos(list: &[(TuneMetric, f64)]) -> TuneSlos {
        TuneSlos(
            list.iter()
                .map(|&(metric, limit_ms)| TuneSlo { metric, limit_ms })
                .collect(),
        )
    }

    // The sample run lasts 1 s: one reply with TTFT 100 ms and two 50 ms gaps over 3 tokens,
    // one single-token reply with TTFT 300 ms, and one failure.

    #[test]
    fn goodput_counts_requests_meeting_every_objective_per_second() {
        let run = sample(&[]);
        // 300.5: the 300 ms TTFT went through seconds and back, and may not be exactly 300.
        assert_eq!(slos(&[(TuneMetric::Ttft, 300.5)]).goodput(&run), 2.0);
        assert_eq!(slos(&[(TuneMetric::Ttft, 150.0)]).goodput(&run), 1.0);
        assert_eq!(
            slos(&[(TuneMetric::Ttft, 300.5), (TuneMetric::Itl, 49.0)]).goodput(&run),
            1.0,
            "the three-token reply misses the ITL objective, the one-token reply has no gaps"
        );
        assert_eq!(slos(&[(TuneMetric::Tpot, 50.0)]).goodput(&run), 2.0);
        assert_eq!(slos(&[(TuneMetric::Tpot, 49.9)]).goodput(&run), 1.0);
    }

    #[test]
    fn the_run_p99_of_each_metric_comes_from_its_distribution() {
        let run = sample(&[]);
        assert_eq!(TuneMetric::Itl.p99_ms(&run), 50.0);
        assert_eq!(TuneMetric::Tpot.p99_ms(&run), 50.0);
        let ttft = TuneMetric::Ttft.p99_ms(&run);
        assert!((ttft - (100.0 + 200.0 * 0.99)).abs() < 1e-9, "{ttft}");
    }
}
