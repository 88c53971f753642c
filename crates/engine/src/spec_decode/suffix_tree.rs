//! `SuffixTree`: a trie of every suffix of the sequences added, each cut to `max_depth`
//! tokens, whose nodes count how often their path occurred.
//!
//! A node's count is the number of positions at which its path starts in the sequences
//! held, i.e. the number of occurrences of that substring (for paths up to `max_depth`).
//! A sequence that only grows is added one token at a time through a `SuffixCursor`:
//! each new token extends the (at most `max_depth`) suffixes that end just before it, so
//! an append costs O(`max_depth`) whatever the sequence's length.

/// A node's place in the tree's arena. Only valid while its node is held: removing a
/// sequence may free nodes, so a cursor must not outlive a removal that touches its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeId(u32);

const ROOT: NodeId = NodeId(0);

#[derive(Debug, Clone, Default)]
struct Node {
    count: u64,
    /// Sorted by token: lookups are binary searches, and a scan meets tokens in id order,
    /// which makes ties between equally frequent children resolve the same way every run.
    children: Vec<(u32, NodeId)>,
}

/// A drafted continuation and its score (the sum of the estimated probabilities of its
/// prefixes, as Arctic Inference scores a draft: the expected number of accepted tokens
/// if the estimates were right).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub score: f64,
}

/// How far a draft may go from its matched node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftLimits {
    /// Most tokens drafted.
    pub max_tokens: usize,
    /// The draft stops before a token whose path probability would fall below this.
    pub min_token_prob: f64,
}

#[derive(Debug, Clone)]
pub struct SuffixTree {
    max_depth: usize,
    nodes: Vec<Node>,
    /// Freed arena slots, reused before the arena grows.
    free: Vec<NodeId>,
}

/// The nodes of the suffixes ending at the last token appended through it, shortest first
/// (`nodes[i]` is the suffix of `i + 1` tokens), at most `max_depth` of them.
#[derive(Debug, Clone, Default)]
pub struct SuffixCursor {
    nodes: Vec<NodeId>,
    /// The next list, kept to reuse its allocation.
    spare: Vec<NodeId>,
}

impl SuffixCursor {
    /// The node of the suffix of `len` tokens, if the sequence is that long (and
    /// `len <= max_depth`).
    pub fn node(&self, len: usize) -> Option<NodeId> {
        len.checked_sub(1).and_then(|i| self.nodes.get(i).copied())
    }

    /// How many suffixes it tracks: min(tokens appended, max_depth).
    pub fn depth(&self) -> usize {
        self.nodes.len()
    }
}

impl SuffixTree {
    pub fn new(max_depth: usize) -> Self {
        assert!(max_depth >= 1, "a suffix tree needs max_depth >= 1");
        Self {
            max_depth,
            nodes: vec![Node::default()],
            free: Vec::new(),
        }
    }

    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Nodes held, the root included: the memory the tree uses grows with this.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Appends one token to the sequence `cursor` follows, counting the suffixes it ends.
    pub fn append(&mut self, cursor: &mut SuffixCursor, token: u32) {
        self.nodes[ROOT.0 as usize].count += 1;
        let mut next = std::mem::take(&mut cursor.spare);
        next.clear();
        let first = self.child_or_insert(ROOT, token);
        next.push(first);
        // The suffix of max_depth tokens cannot grow; every shorter one grows by `token`.
        let keep = cursor.nodes.len().min(self.max_depth - 1);
        for &node in &cursor.nodes[..keep] {
            let child = self.child_or_insert(node, token);
            next.push(child);
        }
        for &node in &next {
            self.nodes[node.0 as usize].count += 1;
        }
        cursor.spare = std::mem::replace(&mut cursor.nodes, next);
    }

    /// Adds a whole sequence.
    pub fn add(&mut self, tokens: &[u32]) {
        let mut cursor = SuffixCursor::default();
        for &t in tokens {
            self.append(&mut cursor, t);
        }
    }

    /// Takes out a sequence that was added with `add` (or appended in full), freeing the
    /// nodes no other occurrence holds.
    ///
    /// Panics if the sequence was not held: counts would go wrong silently otherwise.
    pub fn remove(&mut self, tokens: &[u32]) {
        for start in 0..tokens.len() {
            let path = &tokens[start..tokens.len().min(start + self.max_depth)];
            self.nodes[ROOT.0 as usize].count -= 1;
            let mut node = ROOT;
            for &t in path {
                let Some(child) = self.child(node, t) else {
                    panic!("suffix tree: removing a sequence that was never added");
                };
                let slot = &mut self.nodes[child.0 as usize];
                slot.count -= 1;
                if slot.count == 0 {
                    // A child never counts more than its parent, so everything below is
                    // this occurrence's path alone and goes with it.
                    self.unlink(node, t);
                    self.free_subtree(child);
                    break;
                }
                node = child;
            }
        }
    }

    /// The node whose path is `path`, if it occurred (and `path.len() <= max_depth`).
    pub fn find(&self, path: &[u32]) -> Option<NodeId> {
        path.iter().try_fold(ROOT, |node, &t| self.child(node, t))
    }

    /// How often `path` occurred (0 if never, or if longer than `max_depth`).
    pub fn count(&self, path: &[u32]) -> u64 {
        self.find(path)
            .map_or(0, |n| self.nodes[n.0 as usize].count)
    }

    /// Follows the most frequent child from `from` (ties: the smaller token id), multiplying
    /// the estimated probability child count / node count, until the limits stop it or the
    /// path ends.
    pub fn draft(&self, from: NodeId, limits: DraftLimits) -> Draft {
        let mut draft = Draft::default();
        let mut node = from;
        let mut prob = 1.0;
        while draft.tokens.len() < limits.max_tokens {
            let here = &self.nodes[node.0 as usize];
            // `max_by_key` keeps the last maximum; scanning in reverse token order makes
            // that the smallest token among the most frequent.
            let Some(&(token, child)) = here
                .children
                .iter()
                .rev()
                .max_by_key(|(_, c)| self.nodes[c.0 as usize].count)
            else {
                break;
            };
            let p = prob * self.nodes[child.0 as usize].count as f64 / here.count as f64;
            if p < limits.min_token_prob {
                break;
            }
            draft.tokens.push(token);
            draft.score += p;
            prob = p;
            node = child;
        }
        draft
    }

    fn child(&self, node: NodeId, token: u32) -> Option<NodeId> {
        let children = &self.nodes[node.0 as usize].children;
        children
            .binary_search_by_key(&token, |&(t, _)| t)
            .ok()
            .map(|i| children[i].1)
    }

    fn child_or_insert(&mut self, node: NodeId, token: u32) -> NodeId {
        let at = match self.nodes[node.0 as usize]
            .children
            .binary_search_by_key(&token, |&(t, _)| t)
        {
            Ok(i) => return self.nodes[node.0 as usize].children[i].1,
            Err(at) => at,
        };
        let child = match self.free.pop() {
            Some(id) => id,
            None => {
                let id =
                    u32::try_from(self.nodes.len()).expect("suffix tree: more than u32::MAX nodes");
                self.nodes.push(Node::default());
                NodeId(id)
            }
        };
        self.nodes[node.0 as usize]
            .children
            .insert(at, (token, child));
        child
    }

    fn unlink(&mut self, node: NodeId, token: u32) {
        let children = &mut self.nodes[node.0 as usize].children;
        if let Ok(i) = children.binary_search_by_key(&token, |&(t, _)| t) {
            children.remove(i);
        }
    }

    fn free_subtree(&mut self, top: NodeId) {
        let mut stack = vec![top];
        while let Some(id) = stack.pop() {
            let node = &mut self.nodes[id.0 as usize];
            stack.extend(node.children.drain(..).map(|(_, c)| c));
            // Release the child list's memory too: a freed slot may stay unused.
            node.children = Vec::new();
            node.count = 0;
            self.free.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
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
        // Nothing else is held: one node per distinct substring, plus the root.
        assert_eq!(tree.node_count(), expected.len() + 1);
        // Absent paths count nothing (one token past every held path, and unseen tokens).
        for path in expected.keys() {
            let mut longer = path.clone();
            longer.push(alphabet);
            assert_eq!(tree.count(&longer), 0);
        }
        let total: usize = held.iter().map(Vec::len).sum();
        assert_eq!(tree.nodes[ROOT.0 as usize].count, total as u64);
    }

    proptest! {
        #[test]
        fn counts_equal_a_brute_force_count_of_substrings_through_adds_and_removals(
            depth in 1usize..6,
            seqs in prop::collection::vec(prop::collection::vec(0u32..4, 0..24), 1..6),
            removed in prop::collection::vec(any::<bool>(), 6),
        ) {
            let mut tree = SuffixTree::new(depth);
            // The first sequence is appended token by token, as a running request is.
            let mut cursor = SuffixCursor::default();
            for &t in &seqs[0] {
                tree.append(&mut cursor, t);
            }
            for s in &seqs[1..] {
                tree.add(s);
            }
            assert_counts_match(&tree, &seqs, 4);
            let mut held = Vec::new();
            for (s, &gone) in seqs.iter().zip(&removed) {
                if gone {
                    tree.remove(s);
                } else {
                    held.push(s.clone());
                }
            }
            assert_counts_match(&tree, &held, 4);
            // Freed slots are reused, and counts stay right.
            for s in &seqs {
                tree.add(s);
                held.push(s.clone());
            }
            assert_counts_match(&tree, &held, 4);
        }
    }

    #[test]
    fn a_cursor_tracks_the_suffixes_ending_at_the_last_token() {
        let mut tree = SuffixTree::new(3);
        let mut cursor = SuffixCursor::default();
        for t in [1, 2, 1, 2] {
            tree.append(&mut cursor, t);
        }
        assert_eq!(cursor.depth(), 3);
        assert_eq!(cursor.node(1), tree.find(&[2]));
        assert_eq!(cursor.node(2), tree.find(&[1, 2]));
        assert_eq!(cursor.node(3), tree.find(&[2, 1, 2]));
        assert_eq!(cursor.node(4), None);
        assert_eq!(tree.count(&[1, 2]), 2);
        assert_eq!(tree.count(&[1, 2, 1, 2]), 0, "deeper than max_depth");
    }

    #[test]
    fn a_draft_follows_the_most_frequent_child_and_breaks_ties_by_smaller_token() {
        let mut tree = SuffixTree::new(8);
        tree.add(&[1, 9, 5]);
        tree.add(&[1, 3, 5]);
        tree.add(&[1, 9, 6]);
        tree.add(&[1, 3, 6]);
        let limits = DraftLimits {
            max_tokens: 4,
            min_token_prob: 0.0,
        };
        // After 1: 3 and 9 twice each, 3 wins; after 1 3: 5 and 6 once each, 5 wins.
        let d = tree.draft(tree.find(&[1]).unwrap(), limits);
        assert_eq!(d.tokens, [3, 5]);
        assert!((d.score - (0.5 + 0.25)).abs() < 1e-12);
    }
}
