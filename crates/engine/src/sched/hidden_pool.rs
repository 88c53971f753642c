//! `HiddenPool`: an embedding request's pooled final hidden states, gathered chunk by chunk
//! as its prompt prefills.

use crate::config::{PoolerConfig, PoolingType};
use std::ops::Range;

/// The state an embedding sequence carries between steps: which rows it wants and what they
/// have added up to so far.
#[derive(Debug, Clone)]
pub struct HiddenPool {
    pub config: PoolerConfig,
    /// The last position's row (`Last`), or the sum of every row so far (`Mean`), in f64.
    /// Rows are added one at a time in position order, so the sum (and so the vector) has
    /// the same bits however the prompt was cut into chunks or batched.
    acc: Vec<f64>,
    /// Positions added so far.
    rows: usize,
}

impl HiddenPool {
    pub fn new(config: PoolerConfig) -> Self {
        Self {
            config,
            acc: Vec::new(),
            rows: 0,
        }
    }

    /// Offsets within a chunk of positions `start..start + len` (of a prompt `prompt_len`
    /// long) whose final hidden states this pool needs.
    pub fn wanted(&self, start: usize, len: usize, prompt_len: usize) -> Range<usize> {
        match self.config.pooling_type {
            PoolingType::Mean => 0..len,
            PoolingType::Last if start + len == prompt_len && len > 0 => len - 1..len,
            PoolingType::Last => 0..0,
        }
    }

    /// Whether every prompt position must be computed here (none served from the prefix
    /// cache): a mean needs each position's state, which cached KV does not hold.
    pub fn needs_every_position(&self) -> bool {
        self.config.pooling_type == PoolingType::Mean
    }

    /// Adds `rows` (`width`-wide, in position order) that [`wanted`](Self::wanted) asked for.
    pub fn add(&mut self, rows: &[f32], width: usize) {
        if self.acc.len() != width {
            self.acc = vec![0.0; width];
        }
        for row in rows.chunks_exact(width) {
            match self.config.pooling_type {
                PoolingType::Last => self
                    .acc
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &v)| *a = v as f64),
                PoolingType::Mean => self
                    .acc
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &v)| *a += v as f64),
            }
            self.rows += 1;
        }
    }

    /// Forgets what was gathered: a preempted sequence recomputes its prompt from the start.
    pub fn reset(&mut self) {
        self.acc.clear();
        self.rows = 0;
    }

    /// The embedding: the pooled state, divided by its L2 norm when the config asks (a zero
    /// vector stays zero).
    pub fn vector(&self) -> Vec<f32> {
        let scale = match self.config.pooling_type {
            PoolingType::Mean if self.rows > 0 => 1.0 / self.rows as f64,
            _ => 1.0,
        };
        let mut pooled: Vec<f64> = self.acc.iter().map(|v| v * scale).collect();
        if self.config.normalize {
            let norm = pooled.iter().map(|v| v * v).sum::<f64>().sqrt();
            if norm > 0.0 {
                pooled.iter_mut().for_each(|v| *v /= norm);
            }
        }
        pooled.into_iter().map(|v| v as f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(pooling_type: PoolingType, normalize: bool) -> HiddenPool {
        HiddenPool::new(PoolerConfig {
            pooling_type,
            normalize,
        })
    }

    #[test]
    fn last_keeps_only_the_final_position_and_mean_averages_every_one() {
        let mut last = pool(PoolingType::Last, false);
        assert_eq!(last.wanted(0, 4, 6), 0..0);
        assert_eq!(last.wanted(4, 2, 6), 1..2);
        last.add(&[3.0, 4.0], 2);
        assert_eq!(last.vector(), vec![3.0, 4.0]);
        let mut mean = pool(PoolingType::Mean, false);
        assert_eq!(mean.wanted(4, 2, 6), 0..2);
        mean.add(&[1.0, 2.0, 3.0, 6.0], 2);
        assert_eq!(mean.vector(), vec![2.0, 4.0]);
        mean.reset();
        mean.add(&[5.0, 5.0], 2);
        assert_eq!(mean.vector(), vec![5.0, 5.0]);
    }

    #[test]
    fn normalizing_gives_unit_length() {
        let mut last = pool(PoolingType::Last, true);
        last.add(&[3.0, 4.0], 2);
        assert_eq!(last.vector(), vec![0.6, 0.8]);
    }
}
