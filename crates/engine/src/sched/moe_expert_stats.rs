//! `MoeExpertStats`: how many distinct experts each step ran in a mixture-of-experts layer,
//! the number a step's expert weight reads grow with (each active expert's matrices are read
//! once per step, however many tokens chose it).

/// Upper bounds of the histogram's buckets, in experts: from one token's top-k to a batch
/// that wakes every expert of a 128- or 256-expert model.
pub const ACTIVE_EXPERT_BUCKETS: [f64; 14] = [
    1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0,
];

/// Per step, the distinct experts run in each MoE layer, averaged over the model's MoE
/// layers; one observation per step that ran a forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeExpertStats {
    /// Experts per MoE layer, for scale.
    pub num_experts: usize,
    /// Steps at or under each of `ACTIVE_EXPERT_BUCKETS` (not cumulative), then the rest.
    pub counts: [u64; ACTIVE_EXPERT_BUCKETS.len() + 1],
    pub sum: f64,
    pub count: u64,
    /// The most recent step's value.
    pub last: f64,
}

impl MoeExpertStats {
    pub fn new(num_experts: usize) -> Self {
        Self {
            num_experts,
            counts: [0; ACTIVE_EXPERT_BUCKETS.len() + 1],
            sum: 0.0,
            count: 0,
            last: 0.0,
        }
    }

    pub fn observe(&mut self, active_experts: f64) {
        let slot = ACTIVE_EXPERT_BUCKETS
            .iter()
            .position(|&b| active_experts <= b)
            .unwrap_or(ACTIVE_EXPERT_BUCKETS.len());
        self.counts[slot] += 1;
        self.sum += active_experts;
        self.count += 1;
        self.last = active_experts;
    }

    /// Mean over the observed steps; `None` before the first.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them_and_average() {
        let mut stats = MoeExpertStats::new(128);
        assert_eq!(stats.mean(), None);
        stats.observe(8.0);
        stats.observe(8.5);
        stats.observe(300.0);
        assert_eq!(stats.counts[3], 1, "8 is within the bucket bounded by 8");
        assert_eq!(stats.counts[4], 1, "8.5 goes to the bucket bounded by 12");
        assert_eq!(
            stats.counts[ACTIVE_EXPERT_BUCKETS.len()],
            1,
            "past the last bound"
        );
        assert_eq!(stats.count, 3);
        assert_eq!(stats.last, 300.0);
        assert_eq!(stats.mean(), Some((8.0 + 8.5 + 300.0) / 3.0));
    }
}
