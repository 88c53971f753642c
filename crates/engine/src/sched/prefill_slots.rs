//! `PrefillSlots`: vLLM's partial-prefill limits as one step's counters. A prompt is
//! *partial* while its prefill spans steps; at most `max_num_partial_prefills` are partial
//! at once, and of them at most `max_long_partial_prefills` are *long* (more uncomputed
//! tokens than `long_prefill_token_threshold`). A prompt whose whole prefill fits in the
//! step takes no slot, so short requests are never made to wait for one.

use crate::config::PartialPrefillLimits;

/// Slots taken in the step being planned.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefillSlots {
    partial: usize,
    long: usize,
}

impl PrefillSlots {
    /// Records a prompt that stays partial after this step.
    pub fn take(&mut self, long: bool) {
        self.partial += 1;
        self.long += usize::from(long);
    }

    /// Whether a prompt that would stay partial (and is `long` or not) may start now.
    pub fn admits(&self, limits: &PartialPrefillLimits, long: bool) -> bool {
        self.partial < limits.max_partial && (!long || self.long < limits.max_long)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_prompt_takes_the_only_long_slot_but_leaves_the_short_ones() {
        let limits = PartialPrefillLimits {
            max_partial: 4,
            max_long: 1,
            long_threshold: PartialPrefillLimits::default_threshold(4, 8192, 16),
        };
        assert_eq!(limits.long_threshold, Some(327));
        assert!(limits.is_long(328) && !limits.is_long(327));
        let mut slots = PrefillSlots::default();
        slots.take(true);
        assert!(!slots.admits(&limits, true));
        assert!(slots.admits(&limits, false));
        for _ in 0..3 {
            slots.take(false);
        }
        assert!(!slots.admits(&limits, false));
    }

    #[test]
    fn without_a_threshold_no_prompt_is_long_or_capped() {
        let limits = PartialPrefillLimits::UNLIMITED;
        assert!(!limits.is_long(usize::MAX));
        assert_eq!(limits.chunk_cap(), usize::MAX);
    }
}
