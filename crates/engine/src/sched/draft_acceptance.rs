//! `DraftAcceptance`: how likely a sequence's next draft token is to be accepted, learnt
//! from its own verifies, for deciding how many drafts a step should verify.

/// Acceptance is modelled as geometric: each draft position is accepted with the same
/// probability `p` given the ones before it were. Counts decay so a sequence that stops
/// repeating its input is noticed within a few verifies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftAcceptance {
    accepted: f64,
    rejected: f64,
}

/// Weight kept by older verifies at each new one.
const DECAY: f64 = 0.8;
/// Weight kept by the history at each step without a verify: about 30 steps undo most of it.
const FORGET: f64 = 0.95;

impl Default for DraftAcceptance {
    fn default() -> Self {
        // A prior of one accept and one reject: p = 0.5 until the sequence has a history.
        Self {
            accepted: 1.0,
            rejected: 1.0,
        }
    }
}

impl DraftAcceptance {
    /// The estimated probability that one more draft position is accepted.
    pub fn p(&self) -> f64 {
        self.accepted / (self.accepted + self.rejected)
    }

    /// A step that verified nothing: the estimate drifts back toward the prior, so a
    /// sequence whose early drafts failed is tried again later (a low estimate alone would
    /// keep its drafts out for good).
    pub fn forget(&mut self) {
        self.accepted = 1.0 + (self.accepted - 1.0) * FORGET;
        self.rejected = 1.0 + (self.rejected - 1.0) * FORGET;
    }

    /// Records a verify of `drafted` tokens whose first `accepted` matched.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.accepted = self.accepted * DECAY + accepted as f64;
        self.rejected = self.rejected * DECAY + f64::from(u8::from(accepted < drafted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_follows_what_the_verifies_show() {
        let mut a = DraftAcceptance::default();
        assert_eq!(a.p(), 0.5);
        for _ in 0..10 {
            a.observe(4, 4);
        }
        assert!(a.p() > 0.9, "{}", a.p());
        for _ in 0..20 {
            a.observe(4, 0);
        }
        assert!(a.p() < 0.1, "{}", a.p());
        let before = a;
        a.observe(0, 0);
        assert_eq!(a, before);
        for _ in 0..100 {
            a.forget();
        }
        assert!((a.p() - 0.5).abs() < 0.05, "{}", a.p());
    }
}
