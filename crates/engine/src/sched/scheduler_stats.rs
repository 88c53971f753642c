//! `SchedulerStats`: the scheduler's counters and step-time histogram, what `/metrics`
//! reports about queues, the KV pool and the prefix cache.

use super::moe_expert_stats::MoeExpertStats;
use super::spec_decode_stats::SpecDecodeStats;
use crate::kv::kv_disk_tier::KvDiskStats;

#[derive(Debug, Clone, Default)]
pub struct SchedulerStats {
    pub num_running: usize,
    pub num_waiting: usize,
    /// Admitted requests waiting for their prefix's reads from the disk tier (in no batch;
    /// counted in `num_waiting` too).
    pub num_loading: usize,
    pub kv_cache_usage: f64,
    /// Prompt tokens looked up in the prefix cache, and how many were found.
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    /// With a disk tier (`--kv-offload-dir`): prompt tokens looked up while it was on, and
    /// how many of the prefix cache's hits its files served (vLLM's external prefix cache).
    pub disk_cache_queries: u64,
    pub disk_cache_hits: u64,
    /// The disk tier's own counters (all zero without one). `Engine::stats` fills them in.
    pub kv_offload: KvDiskStats,
    pub num_preemptions: u64,
    /// Wall time of every step (schedule to update).
    pub step_seconds: StepHistogram,
    /// Prompt tokens computed, summed over steps (what the ITL target rations).
    pub prefill_tokens: u64,
    /// Mean |predicted − measured| / measured step time, over the steps the cost model
    /// predicted (moving average, the last ~100 steps weigh most).
    pub step_prediction_error: Option<f64>,
    /// Distinct experts per MoE layer per step, for a mixture-of-experts model. `Engine::stats`
    /// fills it in: the scheduler never sees the model.
    pub moe_active_experts: Option<MoeExpertStats>,
    /// Drafts verified and accepted (all zero without speculative decoding).
    pub spec_decode: SpecDecodeStats,
}

/// Step times in fixed buckets, as a Prometheus histogram reports them.
#[derive(Debug, Clone, Default)]
pub struct StepHistogram {
    /// Steps at or under each of `STEP_BUCKETS` (not cumulative), then the rest.
    pub counts: [u64; STEP_BUCKETS.len() + 1],
    pub sum: f64,
    pub count: u64,
}

/// Upper bounds in seconds: from a lone decode of a small model to a long prefill step.
pub const STEP_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5,
];

impl StepHistogram {
    pub(crate) fn observe(&mut self, seconds: f64) {
        let slot = STEP_BUCKETS
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(STEP_BUCKETS.len());
        self.counts[slot] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}
