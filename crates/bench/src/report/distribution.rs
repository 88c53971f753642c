//! Mean, median, standard deviation and percentiles of one latency metric.

/// Summary of a set of values, in the unit they were given (milliseconds here).
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub mean: f64,
    pub median: f64,
    /// Population standard deviation (divides by n).
    pub std: f64,
    pub max: f64,
    /// (percentile, value) for every requested percentile.
    pub percentiles: Vec<(f64, f64)>,
}

impl Distribution {
    /// Summarises `values`; an empty set summarises to zeros, as there is nothing to report.
    pub fn of(values: &[f64], percentiles: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mean = if sorted.is_empty() {
            0.0
        } else {
            sorted.iter().sum::<f64>() / sorted.len() as f64
        };
        let variance = if sorted.is_empty() {
            0.0
        } else {
            sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / sorted.len() as f64
        };
        Distribution {
            mean,
            median: percentile(&sorted, 50.0),
            std: variance.sqrt(),
            max: sorted.last().copied().unwrap_or(0.0),
            percentiles: percentiles
                .iter()
                .map(|&p| (p, percentile(&sorted, p)))
                .collect(),
        }
    }
}

/// Linear interpolation between the two nearest ranks, over values sorted ascending.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = (p / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
            let below = rank.floor() as usize;
            let above = (below + 1).min(n - 1);
            sorted[below] + (sorted[above] - sorted[below]) * (rank - below as f64)
        }
    }
}

/// The key fragment for a percentile: `99` for 99.0, `99.9` for 99.9.
pub fn percentile_label(p: f64) -> String {
    format!("{p}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let values: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 5.5);
        assert!((percentile(&values, 90.0) - 9.1).abs() < 1e-12);
        assert_eq!(percentile(&values, 100.0), 10.0);
        assert_eq!(percentile(&values, 0.0), 1.0);
    }

    #[test]
    fn std_is_the_population_deviation() {
        let summary = Distribution::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], &[]);
        assert_eq!((summary.mean, summary.std, summary.max), (5.0, 2.0, 9.0));
    }

    #[test]
    fn empty_input_summarises_to_zero() {
        let summary = Distribution::of(&[], &[99.0]);
        assert_eq!(
            summary,
            Distribution {
                mean: 0.0,
                median: 0.0,
                std: 0.0,
                max: 0.0,
                percentiles: vec![(99.0, 0.0)]
            }
        );
    }

    #[test]
    fn labels_drop_a_zero_fraction() {
        assert_eq!(percentile_label(99.0), "99");
        assert_eq!(percentile_label(99.9), "99.9");
    }
}
