//! When each request is sent: all at once, or gamma-distributed gaps around `1 / rate`.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Gamma};

use crate::request_rate::RequestRate;

/// Send offsets from the benchmark start, one per request.
#[derive(Clone, Debug)]
pub struct ArrivalSchedule {
    offsets: Vec<Duration>,
}

impl ArrivalSchedule {
    /// Offsets for `count` requests. The first request leaves at zero; every later one
    /// follows the previous after a gamma gap of shape `burstiness` and mean `1 / rate`
    /// (shape 1 makes the arrivals a Poisson process).
    pub fn new(
        count: usize,
        rate: RequestRate,
        burstiness: f64,
        seed: u64,
    ) -> anyhow::Result<Self> {
        if !(burstiness.is_finite() && burstiness > 0.0) {
            anyhow::bail!("burstiness must be a positive number, got {burstiness}");
        }
        let offsets = match rate {
            RequestRate::Infinite => vec![Duration::ZERO; count],
            RequestRate::PerSecond(rate) => gamma_offsets(count, rate, burstiness, seed)?,
        };
        Ok(ArrivalSchedule { offsets })
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
