//! Service-level objectives (`--goodput ttft:MS tpot:MS e2el:MS`) and the test a request must pass.

use std::str::FromStr;

/// Which latency an objective bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoodputMetric {
    Ttft,
    Tpot,
    E2el,
}

/// One objective: the metric must not exceed `limit_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    pub metric: GoodputMetric,
    pub limit_ms: f64,
}

/// A request's latencies, in milliseconds, as the objectives see them.
#[derive(Clone, Copy, Debug)]
pub struct RequestLatencies {
    pub ttft_ms: f64,
    /// `None` for single-token replies, which have no time per output token.
    pub tpot_ms: Option<f64>,
    pub e2el_ms: f64,
}

impl Slo {
    /// Whether a request meets this objective; a missing TPOT cannot violate one.
    pub fn is_met_by(&self, latencies: &RequestLatencies) -> bool {
        let value = match self.metric {
            GoodputMetric::Ttft => Some(latencies.ttft_ms),
            GoodputMetric::Tpot => latencies.tpot_ms,
            GoodputMetric::E2el => Some(latencies.e2el_ms),
        };
        value.is_none_or(|v| v <= self.limit_ms)
    }
}

/// A request counts towards goodput only when it meets every objective.
pub fn meets_all(slos: &[Slo], latencies: &RequestLatencies) -> bool {
    slos.iter().all(|slo| slo.is_met_by(latencies))
}

impl FromStr for Slo {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        let (name, value) = text.split_once(':').ok_or_else(|| {
            anyhow::anyhow!("goodput objective must look like ttft:500, got {text:?}")
        })?;
        let metric = match name.trim().to_ascii_lowercase().as_str() {
            "ttft" => GoodputMetric::Ttft,
            "tpot" => GoodputMetric::Tpot,
            "e2el" => GoodputMetric::E2el,
            other => anyhow::bail!("unknown goodput metric {other:?}; use ttft, tpot or e2el"),
        };
        let limit_ms: f64 = value
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("goodput limit must be milliseconds, got {value:?}"))?;
        if !(limit_ms.is_finite() && limit_ms >= 0.0) {
            anyhow::bail!("goodput limit must be a non-negative number of ms, got {value:?}");
        }
        Ok(Slo { metric, limit_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latencies(ttft_ms: f64, tpot_ms: Option<f64>, e2el_ms: f64) -> RequestLatencies {
        RequestLatencies {
            ttft_ms,
            tpot_ms,
            e2el_ms,
        }
    }

    #[test]
    fn objectives_parse_from_name_and_milliseconds() {
        let slo: Slo = "tpot:50".parse().unwrap();
        assert_eq!(
            slo,
            Slo {
                metric: GoodputMetric::Tpot,
                limit_ms: 50.0
            }
        );
    }

    #[test]
    fn unknown_metric_or_bad_number_is_an_error() {
        assert!("itl:5".parse::<Slo>().is_err());
        assert!("ttft:soon".parse::<Slo>().is_err());
        assert!("ttft".parse::<Slo>().is_err());
    }

    #[test]
    fn a_request_is_good_only_when_every_objective_holds() {
        let slos = ["ttft:100".parse().unwrap(), "e2el:1000".parse().unwrap()];
        assert!(meets_all(&slos, &latencies(100.0, Some(9.0), 900.0)));
        assert!(!meets_all(&slos, &latencies(101.0, Some(9.0), 900.0)));
        assert!(!meets_all(&slos, &latencies(50.0, Some(9.0), 1001.0)));
    }

    #[test]
    fn single_token_replies_pass_a_tpot_objective() {
        let slos = ["tpot:1".parse().unwrap()];
        assert!(meets_all(&slos, &latencies(10.0, None, 10.0)));
    }
}
