//! `BlockTable`: the blocks one sequence holds in one KV cache group, in position order,
//! with the leading blocks a sliding window no longer sees released.

use crate::kv::block_id::BlockId;

/// Blocks `0..dropped` are gone (released, or never taken, because no later query sees
/// them); `ids[i]` holds positions of block `dropped + i`. A released block cannot be read
/// through the table: [`get`](Self::get) answers `None` for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTable {
    dropped: usize,
    ids: Vec<BlockId>,
}

impl BlockTable {
    /// A table holding `ids` for blocks `0..ids.len()`.
    pub fn new(ids: Vec<BlockId>) -> Self {
        Self { dropped: 0, ids }
    }

    /// A table whose first `dropped` blocks are gone and which holds `ids` after them.
    pub fn after_dropped(dropped: usize, ids: Vec<BlockId>) -> Self {
        Self { dropped, ids }
    }

    /// Blocks `0..covered()` are held or dropped; the next block to take is `covered()`.
    pub fn covered(&self) -> usize {
        self.dropped + self.ids.len()
    }

    /// Leading blocks that are gone.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// The block holding block index `block`'s positions; `None` where it is gone or not yet
    /// taken.
    #[inline(always)]
    pub fn get(&self, block: usize) -> Option<BlockId> {
        block
            .checked_sub(self.dropped)
            .and_then(|i| self.ids.get(i).copied())
    }

    /// The blocks held, in position order.
    pub fn held(&self) -> &[BlockId] {
        &self.ids
    }

    pub fn extend(&mut self, ids: impl IntoIterator<Item = BlockId>) {
        self.ids.extend(ids);
    }

    /// Marks blocks `covered()..upto` gone without holding them (nothing may be held there).
    pub fn skip_to(&mut self, upto: usize) {
        if self.ids.is_empty() && upto > self.dropped {
            self.dropped = upto;
        }
    }

    /// Removes the held blocks before block index `upto` and returns them, oldest first.
    pub fn drop_before(&mut self, upto: usize) -> Vec<BlockId> {
        let n = upto.saturating_sub(self.dropped).min(self.ids.len());
        self.dropped += n;
        self.ids.drain(..n).collect()
    }

    /// Removes every held block and returns them, oldest first; the table is empty after.
    pub fn take_all(&mut self) -> Vec<BlockId> {
        self.dropped = 0;
        std::mem::take(&mut self.ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: std::ops::Range<u32>) -> Vec<BlockId> {
        n.map(BlockId::from_index).collect()
    }

    #[test]
    fn a_dropped_block_cannot_be_read_through_the_table() {
        let mut t = BlockTable::new(ids(0..5));
        assert_eq!(t.drop_before(2), ids(0..2));
        assert_eq!((t.dropped(), t.covered()), (2, 5));
        assert_eq!(t.get(1), None);
        assert_eq!(t.get(2), Some(BlockId::from_index(2)));
        assert_eq!(t.get(5), None);
        assert!(t.drop_before(1).is_empty(), "nothing is dropped twice");
    }

    #[test]
    fn skipping_ahead_moves_an_empty_table_past_blocks_it_never_held() {
        let mut t = BlockTable::default();
        t.skip_to(3);
        t.extend(ids(7..9));
        assert_eq!((t.dropped(), t.covered()), (3, 5));
        assert_eq!(t.get(3), Some(BlockId::from_index(7)));
        assert_eq!(t.take_all(), ids(7..9));
        assert_eq!(t.covered(), 0);
    }
}
