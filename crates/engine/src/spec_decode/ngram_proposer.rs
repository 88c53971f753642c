//! `NgramProposer`: prompt lookup. The sequence's last n tokens, searched for earlier in its
//! own prompt and output; what followed the latest earlier occurrence is the draft.

use super::proposer::Proposer;
use crate::sched::request::SeqId;

#[derive(Debug, Clone)]
pub struct NgramProposer {
    min: usize,
    max: usize,
}

impl NgramProposer {
    /// Matches n-grams of `max` tokens down to `min` (longer first: a longer match predicts better).
    pub fn new(min: usize, max: usize) -> Self {
        assert!(
            1 <= min && min <= max,
            "1 <= prompt_lookup_min <= prompt_lookup_max"
        );
        Self { min, max }
    }

    /// The tokens after the latest earlier occurrence of the longest matching suffix.
    pub fn lookup<'a>(&self, tokens: &'a [u32], k: usize) -> &'a [u32] {
        let len = tokens.len();
        if k == 0 {
            return &[];
        }
        for n in (self.min..=self.max.min(len.saturating_sub(1))).rev() {
            let suffix = &tokens[len - n..];
            // Latest start first; an occurrence must end before the suffix itself starts
            // overlapping it at the very end (start + n < len).
            if let Some(start) = (0..len - n).rev().find(|&s| &tokens[s..s + n] == suffix) {
                let from = start + n;
                return &tokens[from..(from + k).min(len)];
            }
        }
        &[]
    }
}

impl Proposer for NgramProposer {
    fn propose(&mut self, _id: SeqId, tokens: &[u32], _prompt_len: usize, max: usize) -> Vec<u32> {
        self.lookup(tokens, max).to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_what_followed_the_latest_occurrence_of_the_longest_suffix() {
        let p = NgramProposer::new(1, 3);
        // "7 8 9" occurred at 0 (followed by 1 2) and at 5 (followed by 3 4): latest wins.
        let t = [7, 8, 9, 1, 2, 7, 8, 9, 3, 4, 0, 7, 8, 9];
        assert_eq!(p.lookup(&t, 2), &[3, 4]);
        assert_eq!(p.lookup(&t, 10), &[3, 4, 0, 7, 8, 9]);
    }

    #[test]
    fn falls_back_to_shorter_ngrams_and_then_to_nothing() {
        let p = NgramProposer::new(2, 4);
        assert_eq!(p.lookup(&[5, 6, 1, 2, 3, 9, 6, 1], 3), &[2, 3, 9]);
        assert!(p.lookup(&[1, 2, 3, 4], 3).is_empty());
        assert!(NgramProposer::new(1, 1).lookup(&[1], 3).is_empty());
        assert!(p.lookup(&[1, 2, 1, 2], 0).is_empty());
    }
}
