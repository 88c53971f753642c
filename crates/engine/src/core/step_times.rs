//! `StepTimes`: where the engine thread's time goes, summed over steps — the forward pass
//! against the bookkeeping around it (scheduling, sampling, updating, streaming).

use std::time::{Duration, Instant};

/// Cumulative time per phase of `Engine::step`, over every step that ran a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTimes {
    pub steps: u64,
    /// Choosing the batch: `Scheduler::schedule`, including block allocation.
    pub schedule: Duration,
    /// The model's forward pass over the batch.
    pub forward: Duration,
    /// Turning each sampled row's logits into a token.
    pub sample: Duration,
    /// Appending tokens, stop checks, freeing finished sequences and sending events.
    pub update: Duration,
}

impl StepTimes {
    /// Everything but the forward pass and sampling: the engine thread's own overhead.
    pub fn bookkeeping(&self) -> Duration {
        self.schedule + self.update
    }

    /// The steps run since `earlier` (a snapshot of the same engine's times).
    pub fn since(&self, earlier: &StepTimes) -> StepTimes {
        StepTimes {
            steps: self.steps - earlier.steps,
            schedule: self.schedule - earlier.schedule,
            forward: self.forward - earlier.forward,
            sample: self.sample - earlier.sample,
            update: self.update - earlier.update,
        }
    }

    pub fn total(&self) -> Duration {
        self.schedule + self.forward + self.sample + self.update
    }

    /// A one-line summary in microseconds per step, for benchmarks.
    pub fn summary(&self) -> String {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / self.steps.max(1) as f64;
        format!(
            "per step (µs, {} steps): schedule {:.0}, forward {:.0}, sample {:.0}, update {:.0}; bookkeeping {:.2}% of step time",
            self.steps,
            per(self.schedule),
            per(self.forward),
            per(self.sample),
            per(self.update),
            100.0 * self.bookkeeping().as_secs_f64() / self.total().as_secs_f64().max(1e-12)
        )
    }
}

/// Stamps the end of each phase of one step.
pub(crate) struct StepClock {
    last: Instant,
}

impl StepClock {
    pub(crate) fn start() -> Self {
        Self {
            last: Instant::now(),
        }
    }

    /// Adds the time since the previous stamp to `phase`.
    pub(crate) fn lap(&mut self, phase: &mut Duration) {
        let now = Instant::now();
        *phase += now - self.last;
        self.last = now;
    }
}
