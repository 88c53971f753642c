//! Unit tests of `suffix_tree.rs`, kept beside it so the module itself stays readable.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Every substring of up to `depth` tokens of the sequences, with its occurrences.
fn brute_force_counts(seqs: &[Vec<u32>], depth: usize) -> BTreeMap<Vec<u32>, u64> {
    let mut counts = BTreeMap::new();
    for s in seqs {
        for i in 0..s.len() {
            for j in i + 1..=s.len().min(i + depth) {
                *counts.entry(s[i..j].to_vec()).or_insert(0) += 1;
            }
        }
    }
    counts
}

fn assert_counts_match(tree: &SuffixTree, held: &[Vec<u32>], alphabet: u32) {
    let expected = brute_force_counts(held, tree.max_depth());
    for (path, &n) in &expected {
        assert_eq!(tree.count(path), n, "count of {path:?}");
    }
    // Absent paths count nothing: one token past every held path, and unseen tokens.
    for path in expected.keys() {
        for t in 0..=alphabet {
            let mut longer = path.clone();
            longer.push(t);
            if !expected.contains_key(&longer) {
                assert_eq!(tree.count(&longer), 0, "count of {longer:?}");
            }
        }
    }
    let total: usize = held.iter().map(Vec::len).sum();
    assert_eq!(tree.nodes[ROOT.0 as usize].count, total as u64);
}

/// Until something is removed, a node is only made where a path occurred twice.
fn assert_single_occurrences_are_leaves(tree: &SuffixTree) {
    let mut stack = vec![ROOT];
    while let Some(id) = stack.pop() {
        for &(_, c) in &tree.nodes[id.0 as usize].children {
            if let Child::Node(child) = c {
                assert!(tree.nodes[child.0 as usize].count >= 2);
                stack.push(child);
            }
        }
    }
}

proptest! {
    #[test]
    fn counts_equal_a_brute_force_count_of_substrings_through_adds_and_removals(
        depth in 1usize..7,
        seqs in prop::collection::vec(prop::collection::vec(0u32..3, 0..24), 1..6),
        removed in prop::collection::vec(any::<bool>(), 6),
    ) {
        let mut tree = SuffixTree::new(depth);
        // The first sequence grows token by token, as a running request does, and its
        // counts are right at every length.
        let growing = tree.start_sequence();
        for (i, &t) in seqs[0].iter().enumerate() {
            tree.append(growing, t);
            assert_counts_match(&tree, &[seqs[0][..=i].to_vec()], 3);
            assert_single_occurrences_are_leaves(&tree);
        }
        let mut refs = vec![growing];
        for s in &seqs[1..] {
            refs.push(tree.add(s));
        }
        assert_counts_match(&tree, &seqs, 3);
        assert_single_occurrences_are_leaves(&tree);
        let mut held = Vec::new();
        let mut kept = Vec::new();
        for ((s, &r), &gone) in seqs.iter().zip(&refs).zip(&removed) {
            if gone {
                tree.remove(r);
            } else {
                held.push(s.clone());
                kept.push(r);
            }
        }
        assert_counts_match(&tree, &held, 3);
        // Freed slots are reused, and counts stay right.
        for s in &seqs {
            kept.push(tree.add(s));
            held.push(s.clone());
        }
        assert_counts_match(&tree, &held, 3);
        // Taking everything out leaves the bare root.
        for r in kept {
            tree.remove(r);
        }
        assert_eq!(tree.node_count(), 1);
        assert!(tree.nodes[ROOT.0 as usize].children.is_empty());
        assert_eq!(tree.nodes[ROOT.0 as usize].count, 0);
    }
}

/// The greedy draft from `path`, computed from brute-force counts.
fn brute_force_draft(
    counts: &BTreeMap<Vec<u32>, u64>,
    path: &[u32],
    alphabet: u32,
    limits: DraftLimits,
) -> Draft {
    let mut draft = Draft::default();
    let mut at = path.to_vec();
    let mut prob = 1.0;
    while draft.tokens.len() < limits.max_tokens {
        let here = counts[&at];
        let mut best: Option<(u32, u64)> = None;
        for t in 0..alphabet {
            let mut next = at.clone();
            next.push(t);
            if let Some(&c) = counts.get(&next) {
                if best.is_none_or(|(_, b)| c > b) {
                    best = Some((t, c));
                }
            }
        }
        let Some((t, c)) = best else { break };
        let p = prob * c as f64 / here as f64;
        if p < limits.min_token_prob {
            break;
        }
        draft.tokens.push(t);
        draft.score += p;
        prob = p;
        at.push(t);
    }
    draft
}

proptest! {
    #[test]
    fn drafts_equal_a_greedy_walk_over_brute_force_counts(
        depth in 1usize..8,
        seqs in prop::collection::vec(prop::collection::vec(0u32..3, 0..30), 1..5),
        min_token_prob in prop::sample::select(vec![0.0, 0.2, 0.5]),
        max_tokens in 0usize..8,
    ) {
        let mut tree = SuffixTree::new(depth);
        // The first sequence grows around the others being added, so their paths meet
        // its leaves while it is still growing.
        let growing = tree.start_sequence();
        let (before, after) = seqs[0].split_at(seqs[0].len() / 2);
        for &t in before {
            tree.append(growing, t);
        }
        for s in &seqs[1..] {
            tree.add(s);
        }
        for &t in after {
            tree.append(growing, t);
        }
        assert_counts_match(&tree, &seqs, 3);
        let counts = brute_force_counts(&seqs, depth);
        let limits = DraftLimits { max_tokens, min_token_prob };
        for path in counts.keys() {
            let place = tree.find(path).expect("a held path is found");
            assert_eq!(
                tree.draft(place, limits),
                brute_force_draft(&counts, path, 3, limits),
                "draft from {:?}", path
            );
        }
        // The growing sequence's own places draft the same as the paths found.
        for len in 1..=seqs[0].len().min(depth) {
            let path = &seqs[0][seqs[0].len() - len..];
            let place = tree.suffix_place(growing, len).expect("a suffix within max_depth");
            assert_eq!(tree.draft(place, limits), brute_force_draft(&counts, path, 3, limits));
        }
    }
}

#[test]
fn a_growing_sequence_knows_the_place_of_each_suffix() {
    let mut tree = SuffixTree::new(3);
    let seq = tree.start_sequence();
    for t in [1, 2, 1, 2] {
        tree.append(seq, t);
    }
    // "2" and "1 2" occurred twice: nodes; "2 1 2" once: its own leaf.
    assert_eq!(tree.suffix_place(seq, 1), tree.find(&[2]));
    assert_eq!(tree.suffix_place(seq, 2), tree.find(&[1, 2]));
    assert!(matches!(
        tree.suffix_place(seq, 1),
        Some(Place::Node { .. })
    ));
    assert_eq!(
        tree.suffix_place(seq, 3),
        Some(Place::Leaf {
            seq,
            start: 1,
            depth: 3
        })
    );
    assert_eq!(tree.suffix_place(seq, 4), None, "deeper than max_depth");
    assert_eq!(tree.count(&[1, 2]), 2);
    assert_eq!(tree.count(&[1, 2, 1, 2]), 0, "deeper than max_depth");
}

#[test]
fn a_sequence_added_later_turns_a_growing_sequences_leaf_into_its_node() {
    let mut tree = SuffixTree::new(2);
    let growing = tree.start_sequence();
    tree.append(growing, 2);
    tree.add(&[2, 0]);
    // "2" occurred twice now: the growing sequence's suffix "2" ends at that node, and
    // drafts what followed the other occurrence.
    let place = tree.suffix_place(growing, 1).unwrap();
    assert!(matches!(place, Place::Node { .. }));
    let limits = DraftLimits {
        max_tokens: 1,
        min_token_prob: 0.0,
    };
    assert_eq!(tree.draft(place, limits).tokens, [0]);
}

#[test]
fn a_draft_follows_the_most_frequent_child_and_breaks_ties_by_smaller_token() {
    let mut tree = SuffixTree::new(8);
    for s in [[1, 9, 5], [1, 3, 5], [1, 9, 6], [1, 3, 6]] {
        tree.add(&s);
    }
    let limits = DraftLimits {
        max_tokens: 4,
        min_token_prob: 0.0,
    };
    // After 1: 3 and 9 twice each, 3 wins; after 1 3: 5 and 6 once each, 5 wins.
    let d = tree.draft(tree.find(&[1]).unwrap(), limits);
    assert_eq!(d.tokens, [3, 5]);
    assert!((d.score - (0.5 + 0.25)).abs() < 1e-12);
}

#[test]
fn a_draft_reads_on_along_a_single_occurrence() {
    let mut tree = SuffixTree::new(6);
    tree.add(&[4, 5, 6, 7, 8, 9, 10, 11]);
    let limits = DraftLimits {
        max_tokens: 10,
        min_token_prob: 0.5,
    };
    // "5 6" starts one path of at most 6 tokens: 5 6 7 8 9 10.
    let d = tree.draft(tree.find(&[5, 6]).unwrap(), limits);
    assert_eq!(d.tokens, [7, 8, 9, 10]);
    assert_eq!(d.score, 4.0);
    assert_eq!(tree.find(&[5, 7]), None);
    assert_eq!(tree.count(&[5, 6, 7, 8, 9, 10]), 1);
    assert_eq!(tree.count(&[5, 6, 7, 8, 9, 10, 11]), 0);
}
