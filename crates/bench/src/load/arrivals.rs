//! When each request is sent: all at once, gamma-distributed gaps around `1 / rate`, or
//! gaps of exactly `1 / rate`.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Gamma};

use crate::load::request_rate::RequestRate;

/// Send offsets from the benchmark start, one per request.
#[derive(Clone, Debug)]
pub struct ArrivalSchedule {
    offsets: Vec<Duration>,
}

impl ArrivalSchedule {
    /// Offsets for `count` requests. The first request leaves at zero; every later one
    /// follows the previous after a gamma gap of shape `burstiness` and mean `1 / rate`
    /// (shape 1 makes the arrivals a Poisson process). An infinite shape is the limit of the
    /// gamma family: every gap is exactly `1 / rate`.
    pub fn new(
        count: usize,
        rate: RequestRate,
        burstiness: f64,
        seed: u64,
    ) -> anyhow::Result<Self> {
        if burstiness.is_nan() || burstiness <= 0.0 {
            anyhow::bail!("burstiness must be a positive number or \"inf\", got {burstiness}");
        }
        let offsets = match rate {
            RequestRate::Infinite => vec![Duration::ZERO; count],
            RequestRate::PerSecond(rate) if burstiness == f64::INFINITY => {
                RequestRate::per_second(rate)?;
                (0..count)
                    .map(|k| Duration::from_secs_f64(k as f64 / rate))
                    .collect()
            }
            RequestRate::PerSecond(rate) => gamma_offsets(count, rate, burstiness, seed)?,
        };
        Ok(ArrivalSchedule { offsets })
    }

    /// Puts `leaders` requests in front, all leaving at zero, and delays this schedule's own
    /// requests by `lead`: the long prompts of `--dataset mixed` go first and the short ones
    /// follow them at their usual gaps, `--long-lead` seconds later.
    pub fn led_by(self, leaders: usize, lead: Duration) -> Self {
        let offsets = std::iter::repeat_n(Duration::ZERO, leaders)
            .chain(self.offsets.into_iter().map(|offset| offset + lead))
            .collect();
        ArrivalSchedule { offsets }
    }

    pub fn offsets(&self) -> &[Duration] {
        &self.offsets
    }

    /// Gaps between consecutive sends, in seconds.
    pub fn gaps_s(&self) -> Vec<f64> {
        self.offsets
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f64())
            .collect()
    }
}

fn gamma_offsets(count: usize, rate: f64, shape: f64, seed: u64) -> anyhow::Result<Vec<Duration>> {
    RequestRate::per_second(rate)?;
    // Scale chosen so the mean gap, shape * scale, equals 1 / rate.
    let gamma = Gamma::new(shape, 1.0 / (rate * shape))
        .map_err(|e| anyhow::anyhow!("cannot build arrival distribution: {e}"))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut elapsed = 0.0_f64;
    let mut offsets = Vec::with_capacity(count);
    for _ in 0..count {
        offsets.push(Duration::from_secs_f64(elapsed));
        elapsed += gamma.sample(&mut rng);
    }
    Ok(offsets)
}
