//! `PartialPrefillLimits`: how many prompts may prefill at once and what makes one long,
//! as vLLM's `--max-num-partial-prefills`, `--max-long-partial-prefills` and
//! `--long-prefill-token-threshold` spell them.

/// The partial-prefill limits of a scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialPrefillLimits {
    /// Most prompts whose prefill spans steps at once (`--max-num-partial-prefills`).
    pub max_partial: usize,
    /// Most of those that are long (`--max-long-partial-prefills`).
    pub max_long: usize,
    /// A prompt with more uncomputed tokens than this is long, and no step gives it more
    /// (`--long-prefill-token-threshold`); `None`: no prompt is long and none is capped.
    pub long_threshold: Option<usize>,
}

impl PartialPrefillLimits {
    /// No limits: every prompt may prefill at once, each taking all the budget it can.
    pub const UNLIMITED: Self = Self {
        max_partial: usize::MAX,
        max_long: usize::MAX,
        long_threshold: None,
    };

    /// The threshold when none is given: 4% of the context, vLLM's rule when several
    /// prompts may prefill at once (none when only one may), at least one block.
    pub fn default_threshold(
        max_partial: usize,
        max_model_len: usize,
        block_size: usize,
    ) -> Option<usize> {
        (max_partial > 1).then(|| (max_model_len * 4 / 100).max(block_size))
    }

    /// Whether `uncomputed` prompt tokens make a prompt long.
    pub fn is_long(&self, uncomputed: usize) -> bool {
        self.long_threshold.is_some_and(|t| uncomputed > t)
    }

    /// Most tokens one prompt may take from a step.
    pub fn chunk_cap(&self) -> usize {
        self.long_threshold.unwrap_or(usize::MAX)
    }
}
