//! `SuffixTree`: a trie of every suffix of the sequences it holds, each cut to `max_depth`
//! tokens, counting how often each path occurred.
//!
//! A path's count is the number of positions at which it starts in the sequences held, i.e.
//! its number of occurrences (for paths up to `max_depth`). A point becomes a node only
//! when a second occurrence reaches it (a removal may leave a node with one, until that one
//! goes too): below the last such point a path has one occurrence, and a leaf reads the
//! rest of it from that occurrence's sequence, which the tree keeps. Most suffixes are
//! unique after a few tokens, so this holds far fewer than `max_depth` nodes per token.
//!
//! A sequence grows one token at a time: each new token extends the (at most `max_depth`)
//! suffixes that end just before it. A suffix already on its own leaf needs no work, so an
//! append costs at most O(`max_depth`) whatever the sequence's length.

/// An explicit node's place in the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeId(u32);

/// A sequence the tree holds (its tokens back the leaves of its occurrences).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeqRef(u32);

const ROOT: NodeId = NodeId(0);

#[derive(Debug, Clone, Copy)]
enum Child {
    Node(NodeId),
    /// The one occurrence below this point: the suffix of `seq` that starts at `start`.
    Leaf {
        seq: SeqRef,
        start: u32,
    },
}

#[derive(Debug, Clone, Default)]
struct Node {
    count: u64,
    /// Sorted by first token: lookups are binary searches, and a scan meets tokens in id
    /// order, which makes ties between equally frequent children resolve the same way.
    children: Vec<(u32, Child)>,
}

/// Where a suffix ending at a growing sequence's last token stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Node(NodeId),
    /// It occurred once, here: it runs along its own leaf, which grows with the sequence.
    OwnLeaf,
}

#[derive(Debug, Clone, Default)]
struct Sequence {
    tokens: Vec<u32>,
    /// `ends[i]`: the suffix of `i + 1` tokens; at most `max_depth` of them. Released once
    /// the sequence is complete (`add`).
    ends: Vec<End>,
    /// The next `ends`, kept to reuse its allocation.
    spare: Vec<End>,
}

/// A point on a path of the tree, `depth` tokens below the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Node {
        node: NodeId,
        depth: usize,
    },
    /// On the leaf of the one occurrence of this path, the suffix of `seq` from `start`.
    Leaf {
        seq: SeqRef,
        start: usize,
        depth: usize,
    },
}

/// A drafted continuation and its score (the sum of the estimated probabilities of its
/// prefixes, as Arctic Inference scores a draft: the expected number of tokens accepted if
/// the estimates were right).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub score: f64,
}

/// How far a draft may go.
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
    free_nodes: Vec<NodeId>,
    seqs: Vec<Option<Sequence>>,
    free_seqs: Vec<SeqRef>,
}

impl SuffixTree {
    pub fn new(max_depth: usize) -> Self {
        assert!(max_depth >= 1, "a suffix tree needs max_depth >= 1");
        Self {
            max_depth,
            nodes: vec![Node::default()],
            free_nodes: Vec::new(),
            seqs: Vec::new(),
            free_seqs: Vec::new(),
        }
    }

    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Explicit nodes held, the root included (leaves are not counted: they live in their
    /// parent's child list and read their tokens from their sequence).
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free_nodes.len()
    }

    /// Bytes of memory the tree holds: nodes, child lists and the sequences' tokens.
    pub fn heap_bytes(&self) -> usize {
        let nodes: usize = self
            .nodes
            .iter()
            .map(|n| n.children.capacity() * std::mem::size_of::<(u32, Child)>())
            .sum();
        let seqs: usize = self
            .seqs
            .iter()
            .flatten()
            .map(|s| {
                s.tokens.capacity() * 4
                    + (s.ends.capacity() + s.spare.capacity()) * std::mem::size_of::<End>()
            })
            .sum();
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + nodes
            + self.seqs.capacity() * std::mem::size_of::<Option<Sequence>>()
            + seqs
    }

    /// A new, empty sequence to `append` to.
    pub fn start_sequence(&mut self) -> SeqRef {
        let seq = Sequence::default();
        match self.free_seqs.pop() {
            Some(r) => {
                self.seqs[r.0 as usize] = Some(seq);
                r
            }
            None => {
                let r = u32::try_from(self.seqs.len()).expect("suffix tree: too many sequences");
                self.seqs.push(Some(seq));
                SeqRef(r)
            }
        }
    }

    /// Adds a whole sequence (which will not grow).
    pub fn add(&mut self, tokens: &[u32]) -> SeqRef {
        let seq = self.start_sequence();
        for &t in tokens {
            self.append(seq, t);
        }
        let s = self.sequence_mut(seq);
        s.ends = Vec::new();
        s.spare = Vec::new();
        seq
    }

    /// The tokens of `seq`.
    pub fn tokens(&self, seq: SeqRef) -> &[u32] {
        &self.sequence(seq).tokens
    }

    /// Appends one token to `seq`, counting the suffixes it ends.
    pub fn append(&mut self, seq: SeqRef, token: u32) {
        let max_depth = self.max_depth;
        let s = self.sequence_mut(seq);
        s.tokens.push(token);
        let at = s.tokens.len() - 1;
        let ends = std::mem::take(&mut s.ends);
        let mut next = std::mem::take(&mut s.spare);
        next.clear();
        self.nodes[ROOT.0 as usize].count += 1;
        next.push(self.extend(ROOT, 0, seq, at, token));
        // The suffix of max_depth tokens cannot grow; every shorter one grows by `token`.
        for (i, &end) in ends.iter().take(max_depth - 1).enumerate() {
            let depth = i + 1;
            next.push(match end {
                End::OwnLeaf => End::OwnLeaf,
                End::Node(node) => self.extend(node, depth, seq, at - depth, token),
            });
        }
        let s = self.sequence_mut(seq);
        s.spare = ends;
        s.ends = next;
    }

    /// The suffix of `seq` from `start`, now at `node` (`depth` tokens), takes `token`.
    fn extend(&mut self, node: NodeId, depth: usize, seq: SeqRef, start: usize, token: u32) -> End {
        let children = &self.nodes[node.0 as usize].children;
        let i = match children.binary_search_by_key(&token, |&(t, _)| t) {
            Ok(i) => i,
            Err(at) => {
                let leaf = Child::Leaf {
                    seq,
                    start: u32::try_from(start).expect("suffix tree: sequence over u32 tokens"),
                };
                let children = &mut self.nodes[node.0 as usize].children;
                // Most nodes keep one or two children: grow short lists by one, not to
                // Vec's first capacity of four, which would double the tree's memory.
                if children.len() < 4 {
                    children.reserve_exact(1);
                }
                children.insert(at, (token, leaf));
                return End::OwnLeaf;
            }
        };
        match children[i].1 {
            Child::Node(child) => {
                self.nodes[child.0 as usize].count += 1;
                End::Node(child)
            }
            Child::Leaf {
                seq: other,
                start: other_start,
            } => {
                // A second occurrence of this point: it becomes a node counting both, and
                // the other occurrence, if it goes on, continues below it as a leaf. (The
                // other is never this suffix: a suffix's start fixes its depth, and this one
                // is at a node, not on a leaf. Nor does it end here if it is an earlier
                // suffix of this sequence, whose `ends` are being rebuilt: it is longer.)
                let below = (depth + 1 < self.max_depth)
                    .then(|| {
                        let tokens = &self.sequence(other).tokens;
                        tokens.get(other_start as usize + depth + 1).copied()
                    })
                    .flatten();
                let id = self.alloc_node();
                let new = &mut self.nodes[id.0 as usize];
                new.count = 2;
                if let Some(t) = below {
                    new.children.reserve_exact(1);
                    new.children.push((
                        t,
                        Child::Leaf {
                            seq: other,
                            start: other_start,
                        },
                    ));
                }
                self.nodes[node.0 as usize].children[i].1 = Child::Node(id);
                // Another growing sequence whose suffix ended exactly here now ends at the
                // node, not on its leaf.
                let other_seq = self.sequence_mut(other);
                if other_seq.tokens.len() == other_start as usize + depth + 1 {
                    if let Some(end) = other_seq.ends.get_mut(depth) {
                        debug_assert_eq!(*end, End::OwnLeaf);
                        *end = End::Node(id);
                    }
                }
                End::Node(id)
            }
        }
    }

    /// Takes `seq` out: its counts, its leaves, and the nodes no other occurrence holds.
    /// Nodes it leaves with one occurrence stay nodes (they go when that one goes).
    pub fn remove(&mut self, seq: SeqRef) {
        let removed = self.seqs[seq.0 as usize]
            .take()
            .expect("suffix tree: removing a sequence it does not hold");
        self.free_seqs.push(seq);
        let tokens = removed.tokens;
        for start in 0..tokens.len() {
            let path = &tokens[start..tokens.len().min(start + self.max_depth)];
            self.nodes[ROOT.0 as usize].count -= 1;
            let mut node = ROOT;
            for &t in path {
                let children = &mut self.nodes[node.0 as usize].children;
                let i = children
                    .binary_search_by_key(&t, |&(c, _)| c)
                    .expect("suffix tree: a held sequence's path is in the tree");
                match children[i].1 {
                    Child::Leaf { seq: s, start: at } => {
                        debug_assert!(
                            s == seq && at as usize == start,
                            "a leaf is its path's one occurrence"
                        );
                        children.remove(i);
                        break;
                    }
                    Child::Node(child) => {
                        let count = &mut self.nodes[child.0 as usize].count;
                        *count -= 1;
                        if *count == 0 {
                            // A child never counts more than its parent: everything below
                            // was this occurrence alone.
                            self.nodes[node.0 as usize].children.remove(i);
                            self.free_subtree(child);
                            break;
                        }
                        node = child;
                    }
                }
            }
        }
    }

    /// Where the suffix of `len` tokens of the growing `seq` stands (`None` past
    /// `max_depth` or past the sequence's length, and once `add` completed it).
    pub fn suffix_place(&self, seq: SeqRef, len: usize) -> Option<Place> {
        let s = self.sequence(seq);
        let end = *s.ends.get(len.checked_sub(1)?)?;
        Some(match end {
            End::Node(node) => Place::Node { node, depth: len },
            End::OwnLeaf => Place::Leaf {
                seq,
                start: s.tokens.len() - len,
                depth: len,
            },
        })
    }

    /// The end of the path `path`, if it occurred (and `path.len() <= max_depth`).
    pub fn find(&self, path: &[u32]) -> Option<Place> {
        let mut node = ROOT;
        for (depth, &t) in path.iter().enumerate() {
            match self.child(node, t)? {
                Child::Node(child) => node = child,
                Child::Leaf { seq, start } => {
                    let start = start as usize;
                    let tokens = &self.sequence(seq).tokens;
                    let end = start + path.len();
                    let on_leaf = path.len() <= self.max_depth
                        && end <= tokens.len()
                        && tokens[start + depth..end] == path[depth..];
                    return on_leaf.then_some(Place::Leaf {
                        seq,
                        start,
                        depth: path.len(),
                    });
                }
            }
        }
        Some(Place::Node {
            node,
            depth: path.len(),
        })
    }

    /// How often `path` occurred (0 if never, or if longer than `max_depth`).
    pub fn count(&self, path: &[u32]) -> u64 {
        self.find(path).map_or(0, |p| self.count_at(p))
    }

    fn count_at(&self, place: Place) -> u64 {
        match place {
            Place::Node { node, .. } => self.nodes[node.0 as usize].count,
            Place::Leaf { .. } => 1,
        }
    }

    /// Follows the most frequent continuation from `from` (ties: the smaller token id),
    /// multiplying the estimated probability child count / node count, until the limits
    /// stop it or the path ends.
    pub fn draft(&self, from: Place, limits: DraftLimits) -> Draft {
        let mut draft = Draft::default();
        let mut place = from;
        let mut prob = 1.0;
        while draft.tokens.len() < limits.max_tokens {
            let (token, next, p) = match place {
                Place::Leaf { seq, start, depth } => {
                    // One occurrence: each next token has probability 1 given the path.
                    let Some(&t) = self.sequence(seq).tokens.get(start + depth) else {
                        break;
                    };
                    if depth >= self.max_depth {
                        break;
                    }
                    let next = Place::Leaf {
                        seq,
                        start,
                        depth: depth + 1,
                    };
                    (t, next, prob)
                }
                Place::Node { node, depth } => {
                    let here = &self.nodes[node.0 as usize];
                    let child_count = |c: &Child| match *c {
                        Child::Node(id) => self.nodes[id.0 as usize].count,
                        Child::Leaf { .. } => 1,
                    };
                    // `max_by_key` keeps the last maximum; scanning in reverse token order
                    // makes that the smallest token among the most frequent.
                    let Some(&(t, child)) = here
                        .children
                        .iter()
                        .rev()
                        .max_by_key(|(_, c)| child_count(c))
                    else {
                        break;
                    };
                    let next = match child {
                        Child::Node(id) => Place::Node {
                            node: id,
                            depth: depth + 1,
                        },
                        Child::Leaf { seq, start } => Place::Leaf {
                            seq,
                            start: start as usize,
                            depth: depth + 1,
                        },
                    };
                    (
                        t,
                        next,
                        prob * child_count(&child) as f64 / here.count as f64,
                    )
                }
            };
            if p < limits.min_token_prob {
                break;
            }
            draft.tokens.push(token);
            draft.score += p;
            prob = p;
            place = next;
        }
        draft
    }

    fn sequence(&self, seq: SeqRef) -> &Sequence {
        self.seqs[seq.0 as usize]
            .as_ref()
            .expect("suffix tree: a sequence it does not hold")
    }

    fn sequence_mut(&mut self, seq: SeqRef) -> &mut Sequence {
        self.seqs[seq.0 as usize]
            .as_mut()
            .expect("suffix tree: a sequence it does not hold")
    }

    fn child(&self, node: NodeId, token: u32) -> Option<Child> {
        let children = &self.nodes[node.0 as usize].children;
        children
            .binary_search_by_key(&token, |&(t, _)| t)
            .ok()
            .map(|i| children[i].1)
    }

    fn alloc_node(&mut self) -> NodeId {
        match self.free_nodes.pop() {
            Some(id) => id,
            None => {
                let id =
                    u32::try_from(self.nodes.len()).expect("suffix tree: more than u32::MAX nodes");
                self.nodes.push(Node::default());
                NodeId(id)
            }
        }
    }

    fn free_subtree(&mut self, top: NodeId) {
        let mut stack = vec![top];
        while let Some(id) = stack.pop() {
            let node = &mut self.nodes[id.0 as usize];
            stack.extend(node.children.iter().filter_map(|&(_, c)| match c {
                Child::Node(id) => Some(id),
                Child::Leaf { .. } => None,
            }));
            // Release the child list's memory too: a freed slot may stay unused.
            node.children = Vec::new();
            node.count = 0;
            self.free_nodes.push(id);
        }
    }
}

#[cfg(test)]
mod tests;
