//! `SuffixProposer`: SuffixDecoding (Oliaro et al., 2024; as in Snowflake Arctic Inference).
//! Drafts come from two suffix trees: one per running request over its own prompt and
//! output, and one global tree over the outputs of the last `max_cached_requests`
//! finished requests.
//!
//! How it differs from the n-gram proposer (`NgramProposer`): prompt lookup copies what
//! followed the latest earlier occurrence of the sequence's last n tokens in the request
//! itself, so it has nothing to offer a request that does not repeat itself, and it trusts
//! one occurrence as much as many. SuffixDecoding counts every occurrence: at a branch it
//! follows the continuation seen most often and stops where the estimated probability of
//! the path falls below `min_token_prob`, so drafts are long where the history agrees and
//! short where it does not. Its global tree learns across requests, which pays off for
//! repetitive workloads (agents, structured or templated output) where one request's reply
//! resembles earlier replies more than its own prompt. Both are deterministic: the same
//! calls give the same drafts.
//!
//! For every suffix length m (1 up to `max_tree_depth`) that matches a path in a tree, a
//! draft is grown from the matched node for at most `max_spec_factor * m` tokens (so a
//! short, weak match cannot draft far), and the highest-scoring draft wins, as Arctic
//! Inference picks it (ties: the longer match, then the per-request tree). Taking the
//! longest match alone would not do: the trees keep paths of at most `max_tree_depth`
//! tokens, so the longer the match, the less room is left below it to draft.
//!
//! Memory: a request's tree goes when it finishes; the global tree holds the cached outputs'
//! tokens plus one node per path that occurred at least twice (at most `max_tree_depth`
//! per token, far fewer in practice: a unique path is one leaf reading its sequence).

use super::proposer::Proposer;
use super::suffix_tree::{Draft, DraftLimits, SeqRef, SuffixTree};
use crate::config::speculative_config::SuffixSettings;
use crate::sched::request::SeqId;
use std::collections::{HashMap, VecDeque};

/// A running request's own tree, extended with the tokens each call brings.
#[derive(Debug, Clone)]
struct RequestTree {
    tree: SuffixTree,
    /// The request's tokens in `tree`, as far as they have been seen.
    seq: SeqRef,
}

impl RequestTree {
    fn new(max_depth: usize) -> Self {
        let mut tree = SuffixTree::new(max_depth);
        let seq = tree.start_sequence();
        Self { tree, seq }
    }

    /// Brings the tree up to `tokens`: O(max_tree_depth) per token not seen before. A
    /// sequence that does not end with the last `max_tree_depth` tokens seen was rewritten,
    /// not extended, and its tree is rebuilt.
    fn update(&mut self, tokens: &[u32]) {
        let max_depth = self.tree.max_depth();
        let seen = self.tree.tokens(self.seq);
        let from = seen.len().saturating_sub(max_depth);
        let extends = tokens.len() >= seen.len() && seen[from..] == tokens[from..seen.len()];
        if !extends {
            *self = Self::new(max_depth);
        }
        for &t in &tokens[self.tree.tokens(self.seq).len()..] {
            self.tree.append(self.seq, t);
        }
    }
}

#[derive(Debug, Clone)]
pub struct SuffixProposer {
    settings: SuffixSettings,
    requests: HashMap<SeqId, RequestTree>,
    global: SuffixTree,
    /// The outputs in `global`, oldest first.
    cached: VecDeque<SeqRef>,
}

impl SuffixProposer {
    /// A proposer with `--speculative-config`'s suffix settings (already validated by
    /// `SpeculativeConfig::from_json`).
    pub fn from_settings(s: &SuffixSettings) -> Self {
        assert!(
            s.max_tree_depth >= 1,
            "suffix_decoding_max_tree_depth must be at least 1, got {}",
            s.max_tree_depth
        );
        Self {
            settings: *s,
            requests: HashMap::new(),
            global: SuffixTree::new(s.max_tree_depth),
            cached: VecDeque::new(),
        }
    }

    /// The global tree (over recent finished requests' outputs).
    pub fn global_tree(&self) -> &SuffixTree {
        &self.global
    }

    /// Running requests that hold a tree.
    pub fn tracked_requests(&self) -> usize {
        self.requests.len()
    }

    /// Tokens a match of `match_len` may draft.
    fn limits(&self, match_len: usize, max: usize) -> DraftLimits {
        // The epsilon keeps e.g. 3 * (1/3) from flooring to 0.
        let by_factor = (match_len as f64 * self.settings.max_spec_factor + 1e-6).floor();
        DraftLimits {
            max_tokens: (by_factor as usize).min(max),
            min_token_prob: self.settings.min_token_prob,
        }
    }
}

/// Keeps `candidate` if it scores at least as well: callers offer longer matches later, so
/// a tie goes to the longer match.
fn keep_best(best: &mut Draft, candidate: Draft) {
    if candidate.score >= best.score {
        *best = candidate;
    }
}

impl Proposer for SuffixProposer {
    fn propose(&mut self, id: SeqId, tokens: &[u32], _prompt_len: usize, max: usize) -> Vec<u32> {
        let depth = self.settings.max_tree_depth;
        let request = self
            .requests
            .entry(id)
            .or_insert_with(|| RequestTree::new(depth));
        request.update(tokens);
        if max == 0 {
            return Vec::new();
        }
        let request = &self.requests[&id];
        let longest = tokens.len().min(depth);

        // Per-request tree: it knows where each suffix of its sequence stands.
        let mut local = Draft::default();
        for m in 1..=longest {
            let place = request
                .tree
                .suffix_place(request.seq, m)
                .expect("a growing sequence places every suffix up to max_tree_depth");
            keep_best(&mut local, request.tree.draft(place, self.limits(m, max)));
        }

        // Global tree: a suffix that does not occur has no longer suffix that does.
        let mut global = Draft::default();
        for m in 1..=longest {
            let Some(place) = self.global.find(&tokens[tokens.len() - m..]) else {
                break;
            };
            keep_best(&mut global, self.global.draft(place, self.limits(m, max)));
        }

        if global.score > local.score {
            global.tokens
        } else {
            local.tokens
        }
    }

    fn finished(&mut self, id: SeqId, tokens: &[u32], prompt_len: usize) {
        self.requests.remove(&id);
        if self.settings.max_cached_requests == 0 {
            return;
        }
        let output = &tokens[prompt_len.min(tokens.len())..];
        self.cached.push_back(self.global.add(output));
        while self.cached.len() > self.settings.max_cached_requests {
            let oldest = self
                .cached
                .pop_front()
                .expect("more than the limit is held");
            self.global.remove(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SuffixSettings {
        SuffixSettings {
            max_tree_depth: 24,
            max_cached_requests: 10_000,
            max_spec_factor: 1.0,
            min_token_prob: 0.1,
        }
    }

    #[test]
    fn it_drafts_a_repeated_phrase_from_the_prompt() {
        let mut p = SuffixProposer::from_settings(&settings());
        // "10 11 12" occurred before, followed by 13 14 20 21.
        let prompt = [10, 11, 12, 13, 14, 20, 21, 10, 11, 12];
        // A match of 3 tokens drafts at most 3 (max_spec_factor 1).
        assert_eq!(p.propose(SeqId(1), &prompt, prompt.len(), 8), [13, 14, 20]);
        // `max` caps it.
        assert_eq!(p.propose(SeqId(1), &prompt, prompt.len(), 2), [13, 14]);
        assert!(p.propose(SeqId(1), &prompt, prompt.len(), 0).is_empty());
        // Nothing repeats: no draft.
        assert!(p.propose(SeqId(2), &[1, 2, 3, 4], 4, 8).is_empty());
    }

    #[test]
    fn it_learns_from_a_finished_requests_output() {
        let mut p = SuffixProposer::from_settings(&settings());
        let prompt = [100, 101];
        let first = [100, 101, 7, 8, 9, 10, 11];
        // Before anything finished, a new request's context is its own and has no repeat.
        assert!(p.propose(SeqId(1), &first[..3], 2, 4).is_empty());
        p.finished(SeqId(1), &first, prompt.len());
        assert_eq!(
            p.tracked_requests(),
            0,
            "a finished request's own tree is dropped"
        );
        // A second request with the same prompt, one token in: the global tree knows
        // what followed 7 (a match of 1 drafts 1 token), then 7 8 (2 tokens), and so on.
        assert_eq!(p.propose(SeqId(2), &first[..3], 2, 4), [8]);
        assert_eq!(p.propose(SeqId(2), &first[..4], 2, 4), [9, 10]);
        assert_eq!(p.propose(SeqId(2), &first[..5], 2, 4), [10, 11]);
        // The prompt is not cached, only the output: 101 was never an output token.
        assert_eq!(p.global_tree().count(&[101]), 0);
        assert_eq!(p.global_tree().count(&[7, 8, 9]), 1);
    }

    #[test]
    fn min_token_prob_stops_a_draft_at_an_ambiguous_branch() {
        let strict = SuffixSettings {
            min_token_prob: 0.6,
            ..settings()
        };
        let lenient = SuffixSettings {
            min_token_prob: 0.4,
            ..settings()
        };
        let mut drafts = Vec::new();
        for s in [strict, lenient] {
            let mut p = SuffixProposer::from_settings(&s);
            // Two outputs agree on 1 2 3, then branch: 4 5 or 6 7 (probability 1/2 each).
            p.finished(SeqId(1), &[0, 1, 2, 3, 4, 5], 1);
            p.finished(SeqId(2), &[0, 1, 2, 3, 6, 7], 1);
            drafts.push(p.propose(SeqId(3), &[9, 1, 2], 1, 8));
        }
        assert_eq!(drafts[0], [3], "stops before the branch below 0.6");
        // At 0.4 it goes on through the branch, taking the smaller token of the tie.
        assert_eq!(drafts[1], [3, 4]);
    }

    #[test]
    fn max_spec_factor_bounds_draft_length_by_match_length() {
        let seq = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4];
        let draft = |factor: f64| {
            let s = SuffixSettings {
                max_spec_factor: factor,
                min_token_prob: 0.0,
                ..settings()
            };
            SuffixProposer::from_settings(&s).propose(SeqId(1), &seq, seq.len(), 16)
        };
        // The longest useful match is 1 2 3 4 (4 tokens).
        assert_eq!(draft(1.0), [5, 6, 7, 8]);
        assert_eq!(draft(0.5), [5, 6]);
        assert_eq!(draft(0.25), [5]);
        assert_eq!(draft(2.0), [5, 6, 7, 8, 1, 2, 3, 4]);
    }

    #[test]
    fn eviction_after_max_cached_requests_forgets_the_oldest() {
        let s = SuffixSettings {
            max_cached_requests: 2,
            ..settings()
        };
        let mut p = SuffixProposer::from_settings(&s);
        p.finished(SeqId(1), &[0, 11, 12, 13], 1);
        p.finished(SeqId(2), &[0, 21, 22, 23], 1);
        assert_eq!(p.propose(SeqId(4), &[5, 11, 12], 1, 4), [13]);
        p.finished(SeqId(3), &[0, 31, 32, 33], 1);
        // The first output is gone, counts and nodes both; the second and third remain.
        assert!(p.propose(SeqId(5), &[5, 11, 12], 1, 4).is_empty());
        assert_eq!(p.global_tree().count(&[11]), 0);
        assert_eq!(p.propose(SeqId(6), &[5, 21, 22], 1, 4), [23]);
        assert_eq!(p.propose(SeqId(7), &[5, 31, 32], 1, 4), [33]);
        // Nothing in the two outputs left occurred twice: the root is the one node.
        assert_eq!(p.global_tree().node_count(), 1);
    }

    #[test]
    fn the_same_inputs_give_the_same_drafts_twice() {
        // A repetitive stream with ties at its branches, fed as a running request grows.
        let stream: Vec<u32> = (0..400u32).map(|i| (i * i + i / 7) % 5).collect();
        let run = || {
            let mut p = SuffixProposer::from_settings(&SuffixSettings {
                max_tree_depth: 6,
                min_token_prob: 0.0,
                ..settings()
            });
            p.finished(SeqId(9), &stream[..200], 50);
            let mut drafts = Vec::new();
            for len in (201..stream.len()).step_by(3) {
                drafts.push(p.propose(SeqId(1), &stream[..len], 200, 5));
            }
            drafts
        };
        let first = run();
        assert!(first.iter().any(|d| !d.is_empty()), "the stream repeats");
        assert_eq!(first, run());
    }

    #[test]
    fn incremental_updates_give_the_drafts_a_fresh_proposer_gives() {
        let stream: Vec<u32> = (0..300u32).map(|i| (i * 7 + i / 11) % 6).collect();
        let s = SuffixSettings {
            max_tree_depth: 8,
            ..settings()
        };
        let mut running = SuffixProposer::from_settings(&s);
        for len in (1..stream.len()).step_by(5) {
            let fresh = SuffixProposer::from_settings(&s).propose(SeqId(1), &stream[..len], 1, 6);
            assert_eq!(running.propose(SeqId(1), &stream[..len], 1, 6), fresh);
        }
        // A rewritten sequence (not an extension) is rebuilt, not mixed with the old one.
        let other: Vec<u32> = stream.iter().map(|t| t + 10).collect();
        let fresh = SuffixProposer::from_settings(&s).propose(SeqId(1), &other, 1, 6);
        assert_eq!(running.propose(SeqId(1), &other, 1, 6), fresh);
    }

    #[test]
    fn zero_cached_requests_keeps_no_global_tree() {
        let mut p = SuffixProposer::from_settings(&SuffixSettings {
            max_cached_requests: 0,
            ..settings()
        });
        p.finished(SeqId(1), &[0, 1, 2, 3], 1);
        assert_eq!(p.global_tree().node_count(), 1);
        assert!(p.propose(SeqId(2), &[1, 2], 0, 4).is_empty());
    }
}
