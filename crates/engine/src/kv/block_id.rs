//! `BlockId`: one page of the KV pool, by index.

/// A page of the KV pool: row `index` of every slab (see `KvCache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(u32);

impl BlockId {
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The page at `i`; only the block manager hands pages out.
    pub(crate) fn from_index(i: u32) -> Self {
        Self(i)
    }
}
