//! `StepCostModel`: what a step of a given shape costs on this machine, fitted online from
//! the steps the engine has run, so the scheduler can hold an inter-token-latency target.
//!
//! A step's time is modelled as `a + b·tokens + c·context + d·sequences`: weights stream
//! once per step (`a`), every computed token pays the matmuls (`b`), attention pays per
//! attended position (`c`), and each sequence pays sampling and bookkeeping (`d`). The
//! coefficients are the least-squares fit over a sliding window of recent steps, so they
//! follow the machine (other load, thermal state) without hand-tuned constants.

use crate::sched::scheduler_output::ScheduledChunk;
use std::collections::VecDeque;

/// The features of one step that its cost depends on.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    /// Tokens computed.
    pub tokens: usize,
    /// Positions attended, summed over the computed tokens (a token at position p sees p + 1).
    pub context: usize,
    /// Sequences in the batch.
    pub seqs: usize,
}

impl StepShape {
    pub fn of(chunks: &[ScheduledChunk]) -> Self {
        chunks
            .iter()
            .fold(Self::default(), |s, c| s.plus(Self::chunk(c.start, c.len)))
    }

    /// One sequence computing `len` tokens from position `start`.
    pub fn chunk(start: usize, len: usize) -> Self {
        Self {
            tokens: len,
            context: len * start + len * (len + 1) / 2,
            seqs: usize::from(len > 0),
        }
    }

    pub fn plus(self, o: Self) -> Self {
        Self {
            tokens: self.tokens + o.tokens,
            context: self.context + o.context,
            seqs: self.seqs + o.seqs,
        }
    }

    fn features(self) -> [f64; FEATURES] {
        [
            1.0,
            self.tokens as f64,
            self.context as f64,
            self.seqs as f64,
        ]
    }
}

const FEATURES: usize = 4;
/// Steps remembered: enough to span decode-only and prefill-heavy steps, few enough to
/// follow a change of load within seconds.
const WINDOW: usize = 256;
/// Observations before the model predicts. Few, because a fresh server facing a burst runs
/// its costliest steps first; the ridge keeps the early fits sane (64 users at once: P99 ITL
/// 354 ms against a 250 ms target with 4, 1.2 s with 16).
const MIN_OBSERVATIONS: usize = 4;

#[derive(Debug, Clone)]
pub struct StepCostModel {
    window: VecDeque<(StepShape, f64)>,
    /// Coefficients of the last fit, `None` until there are enough observations.
    coef: Option<[f64; FEATURES]>,
    /// Root mean square of the window's relative residuals `(t − predicted) / predicted`:
    /// how far a step strays from its forecast (step noise scales with step size).
    spread: f64,
}

impl Default for StepCostModel {
    fn default() -> Self {
        Self {
            window: VecDeque::with_capacity(WINDOW),
            coef: None,
            spread: 0.0,
        }
    }
}

impl StepCostModel {
    /// Records a step's measured seconds and refits.
    pub fn observe(&mut self, shape: StepShape, seconds: f64) {
        if !seconds.is_finite() || seconds < 0.0 || shape.tokens == 0 {
            return;
        }
        if self.window.len() == WINDOW {
            self.window.pop_front();
        }
        self.window.push_back((shape, seconds));
        if self.window.len() >= MIN_OBSERVATIONS {
            self.coef = fit(&self.window);
            self.spread = self.relative_spread();
        }
    }

    fn relative_spread(&self) -> f64 {
        let mut sum = 0.0;
        for &(shape, t) in &self.window {
            if let Some(p) = self.predict(shape).filter(|&p| p > 0.0) {
                sum += ((t - p) / p).powi(2);
            }
        }
        (sum / self.window.len() as f64).sqrt()
    }

    /// A forecast most steps of `shape` stay under: the prediction plus one of the window's
    /// relative spreads. The ITL target holds this bound, so the noise around a forecast
    /// does not land on the P99: the bare prediction is a central estimate, so the slow steps
    /// around it would pass the target, and a second spread would hold steps further under
    /// the target than it asks, at the cost of throughput.
    pub fn predict_upper(&self, shape: StepShape) -> Option<f64> {
        self.predict(shape).map(|p| p * (1.0 + self.spread))
    }

    /// Predicted seconds for a step of `shape`, once the model has seen enough steps.
    pub fn predict(&self, shape: StepShape) -> Option<f64> {
        let coef = self.coef?;
        let x = shape.features();
        Some((0..FEATURES).map(|i| coef[i] * x[i]).sum::<f64>().max(0.0))
    }

    /// The fitted `[a, b, c, d]`, for reports.
    pub fn coefficients(&self) -> Option<[f64; FEATURES]> {
        self.coef
    }
}

/// Least squares of relative errors (each step weighted by 1/t²) through the normal
/// equations: step noise scales with step size, and the short steps the ITL target
/// rations must not be swamped by a few long prefills, whose absolute errors would
/// otherwise decide the fit (calibration: three multi-second steps among a dozen short
/// ones). Each feature is scaled to unit mean square (token and context counts differ by
/// orders of magnitude) and a small ridge lets steps that never vary a feature (every step
/// one sequence) still give a usable fit.
fn fit(window: &VecDeque<(StepShape, f64)>) -> Option<[f64; FEATURES]> {
    let n = window.len() as f64;
    let mut scale = [0.0f64; FEATURES];
    for (shape, _) in window {
        for (s, x) in scale.iter_mut().zip(shape.features()) {
            *s += x * x / n;
        }
    }
    let scale = scale.map(|s| if s > 0.0 { 1.0 / s.sqrt() } else { 0.0 });
    let mut a = [[0.0f64; FEATURES]; FEATURES];
    let mut b = [0.0f64; FEATURES];
    let mut weights = 0.0;
    for &(shape, t) in window {
        let w = 1.0 / t.max(1e-6).powi(2);
        weights += w;
        let f = shape.features();
        let x: [f64; FEATURES] = std::array::from_fn(|i| f[i] * scale[i]);
        for i in 0..FEATURES {
            b[i] += w * x[i] * t;
            for j in 0..FEATURES {
                a[i][j] += w * x[i] * x[j];
            }
        }
    }
    for (i, row) in a.iter_mut().enumerate() {
        row[i] += 1e-6 * weights;
    }
    let w = solve(a, b)?;
    Some(std::array::from_fn(|i| w[i] * scale[i]))
}

/// Gaussian elimination with partial pivoting; `None` for a singular system.
fn solve(mut a: [[f64; FEATURES]; FEATURES], mut b: [f64; FEATURES]) -> Option<[f64; FEATURES]> {
    for col in 0..FEATURES {
        let pivot = (col..FEATURES).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (pivot_row, pivot_b) = (a[col], b[col]);
        for row in col + 1..FEATURES {
            let f = a[row][col] / pivot_row[col];
            for (v, p) in a[row][col..].iter_mut().zip(&pivot_row[col..]) {
                *v -= f * p;
            }
            b[row] -= f * pivot_b;
        }
    }
    let mut x = [0.0f64; FEATURES];
    for row in (0..FEATURES).rev() {
        let rest: f64 = (row + 1..FEATURES).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - rest) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(s: StepShape) -> f64 {
        0.004 + 1e-4 * s.tokens as f64 + 2e-8 * s.context as f64 + 3e-5 * s.seqs as f64
    }

    #[test]
    fn noiseless_steps_give_back_the_coefficients_they_were_made_with() {
        let mut m = StepCostModel::default();
        for i in 0..64usize {
            let shape = StepShape::chunk(i * 37 % 500, 1 + i * 13 % 300)
                .plus(StepShape::chunk(i * 11 % 900, 1));
            let shape = StepShape {
                seqs: shape.seqs + i % 7,
                tokens: shape.tokens + i % 7,
                ..shape
            };
            m.observe(shape, cost(shape));
        }
        let [a, b, c, d] = m.coefficients().expect("fitted");
        let close = |got: f64, want: f64| (got - want).abs() <= want * 1e-3;
        assert!(
            close(a, 0.004) && close(b, 1e-4) && close(c, 2e-8) && close(d, 3e-5),
            "{a} {b} {c} {d}"
        );
    }

    #[test]
    fn the_upper_forecast_adds_the_relative_spread_of_noisy_steps() {
        let (mut m, mut clean) = (StepCostModel::default(), StepCostModel::default());
        let mut rng = 0x2545_F491_u64;
        let mut steps = Vec::new();
        for i in 0..256usize {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
            let shape = StepShape::chunk(i * 37 % 500, 1 + i * 13 % 300);
            // ±10% uniform noise: a relative spread of 0.1/√3 ≈ 0.058.
            let t = cost(shape) * (0.9 + 0.2 * u);
            m.observe(shape, t);
            clean.observe(shape, cost(shape));
            steps.push((shape, t));
        }
        let shape = StepShape::chunk(100, 200);
        let (p, upper) = (m.predict(shape).unwrap(), m.predict_upper(shape).unwrap());
        let spread = upper / p - 1.0;
        assert!((0.045..0.07).contains(&spread), "{spread}");
        let under = steps
            .iter()
            .filter(|&&(s, t)| t <= m.predict_upper(s).unwrap())
            .count();
        assert!(
            under * 10 >= steps.len() * 7,
            "{under} of {} under",
            steps.len()
        );
        let (p, upper) = (
            clean.predict(shape).unwrap(),
            clean.predict_upper(shape).unwrap(),
        );
        // Only the ridge's tiny bias is left to spread.
        assert!((upper - p).abs() <= p * 1e-4, "noiseless: {p} vs {upper}");
    }

    #[test]
    fn a_few_long_prefill_steps_do_not_swamp_the_forecast_of_short_steps() {
        // Calibration's shape: three long prefills, their decodes, a batch of short prompts.
        // One cold step runs 40% over; the short steps are the ones the ITL target rations.
        // This machine's costs: a decode step ~8 ms, a 2048-token prefill ~4.5 s.
        let cost = |s: StepShape| {
            0.007 + 2e-3 * s.tokens as f64 + 1e-7 * s.context as f64 + 1e-4 * s.seqs as f64
        };
        let mut m = StepCostModel::default();
        let mut observe = |shape: StepShape, slow: f64| m.observe(shape, cost(shape) * slow);
        for (i, len) in [2048usize, 1024, 512].into_iter().enumerate() {
            observe(StepShape::chunk(0, len), if i == 0 { 1.4 } else { 1.0 });
            observe(StepShape::chunk(len, 1), 1.05);
            observe(StepShape::chunk(len + 1, 1), 0.95);
        }
        let batch = |start, len| {
            (0..8).fold(StepShape::default(), |s, _| {
                s.plus(StepShape::chunk(start, len))
            })
        };
        observe(batch(0, 8), 1.1);
        observe(batch(8, 1), 0.9);
        observe(batch(9, 1), 1.0);
        for shape in [
            StepShape::chunk(0, 10),
            StepShape::chunk(40, 1),
            batch(20, 1),
        ] {
            let upper = m.predict_upper(shape).unwrap();
            assert!(
                upper <= 2.0 * cost(shape),
                "{shape:?}: {upper} vs {}",
                cost(shape)
            );
        }
    }

    #[test]
    fn the_model_predicts_nothing_until_it_has_seen_enough_steps() {
        let mut m = StepCostModel::default();
        let shape = StepShape::chunk(0, 10);
        for _ in 0..MIN_OBSERVATIONS - 1 {
            m.observe(shape, 0.01);
            assert_eq!(m.predict(shape), None);
        }
        m.observe(shape, 0.01);
        let p = m.predict(shape).expect("enough steps");
        assert!((p - 0.01).abs() < 1e-4, "{p}");
    }
}
