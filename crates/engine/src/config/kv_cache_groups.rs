//! `KvCacheGroups`: how a model's layers share KV pages — layers of one attention type in
//! groups of equal size, each group with its own block tables over one pool of pages.
//!
//! A page holds `group_size` layers' keys and values for one block of tokens, so every
//! group's pages have the same bytes and one free list serves them all (vLLM's hybrid KV
//! cache manager). The group size is the gcd of the layer counts of each attention type:
//! Llama and Qwen (every layer global) are one group of every layer, exactly the one-table
//! layout; gemma-3-270m (3 global, 15 sliding) is 1 full and 5 sliding groups of 3;
//! tiny-gemma3 (1 global, 6 sliding) is 7 groups of one layer. A sliding group needs only
//! the blocks its window still sees, so at long context it holds a bounded number of pages
//! while a full group holds one per block.
//!
//! It lives in `config` because the memory plan needs a page's bytes and the pool's
//! capacity in tokens before anything is built, and `config` names nothing above it.

use super::sliding_window::SlidingWindow;

/// Group `g`'s index; `0..num_groups`.
pub type KvGroup = usize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvCacheGroups {
    /// Each group's window (`None`: full attention), full groups first.
    windows: Vec<Option<SlidingWindow>>,
    /// Per layer: its group and its index within the group (which slab it uses).
    layers: Vec<(KvGroup, usize)>,
    group_size: usize,
}

impl KvCacheGroups {
    /// Groups layers by their window (`windows[l]`, `None` for a global layer), in layer
    /// order within each kind.
    pub fn new(windows: &[Option<SlidingWindow>]) -> Self {
        assert!(!windows.is_empty(), "a model has at least one layer");
        // Attention types in order: full first, then each distinct window as first seen.
        let mut kinds: Vec<Option<SlidingWindow>> = Vec::new();
        if windows.iter().any(Option::is_none) {
            kinds.push(None);
        }
        for w in windows.iter().flatten() {
            if !kinds.contains(&Some(*w)) {
                kinds.push(Some(*w));
            }
        }
        let count = |k: &Option<SlidingWindow>| windows.iter().filter(|w| *w == k).count();
        let group_size = kinds.iter().map(count).fold(0, gcd);
        let mut groups = Vec::new();
        let mut layers = vec![(0, 0); windows.len()];
        for kind in &kinds {
            let members: Vec<usize> = (0..windows.len())
                .filter(|&l| windows[l] == *kind)
                .collect();
            for chunk in members.chunks(group_size) {
                let group = groups.len();
                groups.push(*kind);
                for (j, &l) in chunk.iter().enumerate() {
                    layers[l] = (group, j);
                }
            }
        }
        Self {
            windows: groups,
            layers,
            group_size,
        }
    }

    /// Every layer in one full-attention group: one block table for all layers.
    pub fn single(num_layers: usize) -> Self {
        Self::new(&vec![None; num_layers])
    }

    pub fn num_groups(&self) -> usize {
        self.windows.len()
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Layers a page holds (the slabs of the KV cache).
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// The group whose block table layer `layer` reads and writes.
    pub fn group_of(&self, layer: usize) -> KvGroup {
        self.layers[layer].0
    }

    /// The slab layer `layer` lives in: its index within its group.
    pub fn slab_of(&self, layer: usize) -> usize {
        self.layers[layer].1
    }

    /// Group `group`'s window; `None` for full attention.
    pub fn window(&self, group: KvGroup) -> Option<SlidingWindow> {
        self.windows[group]
    }

    /// The first full-attention group, if any: the one whose blocks the KV-cache events
    /// describe (its block set is what a router indexes).
    pub fn full_group(&self) -> Option<KvGroup> {
        self.windows.iter().position(Option::is_none)
    }

    /// The first block of group `group` that a query at position `pos` (or any later one)
    /// still needs: 0 for full attention.
    pub fn first_needed_block(&self, group: KvGroup, pos: usize, block_size: usize) -> usize {
        self.windows[group].map_or(0, |w| w.first_visible(pos) / block_size)
    }

    /// The most pages one sequence of `tokens` tokens can hold at once when no step computes
    /// more than `max_chunk` of its tokens: every block in a full group; in a sliding group
    /// the blocks from its window's start before a chunk to the chunk's end.
    pub fn pages_for_one_sequence(
        &self,
        tokens: usize,
        block_size: usize,
        max_chunk: usize,
    ) -> usize {
        let blocks = tokens.div_ceil(block_size);
        self.windows
            .iter()
            .map(|w| match w {
                None => blocks,
                // The span `window - 1 + chunk` may start anywhere in a block.
                Some(w) => blocks.min((w.get() - 1 + max_chunk).div_ceil(block_size) + 1),
            })
            .sum()
    }

    /// The pool's capacity in tokens, by what holds them.
    pub fn capacity(&self, num_pages: usize, block_size: usize, max_chunk: usize) -> KvCapacity {
        let short_context = num_pages / self.num_groups() * block_size;
        // `pages_for_one_sequence` grows with `tokens`: the longest that fits, by bisection.
        let fits = |t: usize| self.pages_for_one_sequence(t, block_size, max_chunk) <= num_pages;
        let (mut lo, mut hi) = (0usize, num_pages.saturating_mul(block_size));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        KvCapacity {
            num_pages,
            short_context,
            one_sequence: lo,
        }
    }
}

/// What a pool of pages holds, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCapacity {
    pub num_pages: usize,
    /// Tokens when every sequence is shorter than the sliding window: each token's block
    /// takes a page in every group, as with one table per layer.
    pub short_context: usize,
    /// The longest single sequence the pool holds alone (sliding groups holding only their
    /// window's pages).
    pub one_sequence: usize,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LocalAttention;

    fn gemma(period: usize, layers: usize, window: usize) -> KvCacheGroups {
        let w = SlidingWindow::new(window).unwrap();
        let kinds = LocalAttention::every_nth_global(period, layers);
        let windows: Vec<_> = kinds
            .iter()
            .map(|k| match k {
                crate::config::LayerKind::Global => None,
                crate::config::LayerKind::Sliding => Some(w),
            })
            .collect();
        KvCacheGroups::new(&windows)
    }

    #[test]
    fn a_model_with_only_global_layers_is_one_group_of_every_layer() {
        let g = KvCacheGroups::single(30);
        assert_eq!((g.num_groups(), g.group_size()), (1, 30));
        assert!((0..30).all(|l| g.group_of(l) == 0 && g.slab_of(l) == l));
        assert_eq!(g.pages_for_one_sequence(100, 16, 512), 7);
        let cap = g.capacity(10, 16, 512);
        assert_eq!((cap.short_context, cap.one_sequence), (160, 160));
    }

    #[test]
    fn gemma3_270m_is_one_full_group_and_five_sliding_groups_of_three_layers() {
        let g = gemma(6, 18, 512);
        assert_eq!((g.num_groups(), g.group_size()), (6, 3));
        assert_eq!(g.full_group(), Some(0));
        // Layers 5, 11, 17 are global: group 0, slabs 0, 1, 2.
        assert_eq!(
            [5, 11, 17].map(|l| (g.group_of(l), g.slab_of(l))),
            [(0, 0), (0, 1), (0, 2)]
        );
        // Sliding layers 0, 1, 2 form group 1; 3, 4, 6 group 2.
        assert_eq!(
            [0, 1, 2, 3, 4, 6].map(|l| g.group_of(l)),
            [1, 1, 1, 2, 2, 2]
        );
        assert!((1..6).all(|grp| g.window(grp).is_some()));
        // 4,096 tokens: 256 full pages, each sliding group (511 + 512) / 16 + 1 = 65.
        assert_eq!(g.pages_for_one_sequence(4096, 16, 512), 256 + 5 * 65);
        // Short sequences take a page per group and block, as before.
        assert_eq!(g.pages_for_one_sequence(100, 16, 512), 6 * 7);
    }

    #[test]
    fn tiny_gemma3_is_seven_groups_of_one_layer() {
        let g = gemma(7, 7, 8);
        assert_eq!((g.num_groups(), g.group_size()), (7, 1));
        assert_eq!(g.group_of(6), 0);
        assert_eq!(g.first_needed_block(0, 100, 4), 0);
        // A row at 20 sees 13..=20: block 3 of 4-token blocks onwards.
        assert_eq!(g.first_needed_block(1, 20, 4), 3);
    }

    #[test]
    fn the_longest_lone_sequence_outgrows_the_short_context_capacity_with_sliding_groups() {
        let g = gemma(6, 18, 512);
        let cap = g.capacity(6 * 256, 16, 512);
        assert_eq!(cap.short_context, 4096);
        assert!(g.pages_for_one_sequence(cap.one_sequence, 16, 512) <= 6 * 256);
        assert!(g.pages_for_one_sequence(cap.one_sequence + 1, 16, 512) > 6 * 256);
        assert!(cap.one_sequence > 2 * 4096, "{cap:?}");
    }
}
