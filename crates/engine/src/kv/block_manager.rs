//! `BlockManager`: the mechanism behind the paged KV cache — which blocks are free, who
//! holds each one, and which full blocks can be reused by content (prefix caching).
//!
//! It never decides anything: allocation returns `None` when the pool is short, and the
//! scheduler chooses what to preempt.
//!
//! Prefix-cache keys are SHA-256 over (parent key, tokens), as vLLM keys them since
//! CVE-2025-25183: a 64-bit unkeyed hash lets a client craft a prompt whose blocks alias
//! another user's. A hit is still verified: the block's own tokens and its parent's key
//! must both match, so even a key collision cannot hand out KV computed for another prefix.
//!
//! Once `enable_events` is called it also records each change to the set of cached blocks
//! as a [`KvEvent`] (a block registered, a cached block evicted), for `take_events` to hand
//! on; until then nothing is recorded and nothing allocated.

use crate::kv::kv_event::KvEvent;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(u32);

impl BlockId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Content hash of a full block, chained with its predecessor's so equal hashes mean
/// equal prefixes, not just equal blocks.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHash([u8; 32]);

impl std::fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head: String = self.0[..8].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "BlockHash({head}…)")
    }
}

impl BlockHash {
    /// SHA-256 of an unambiguous encoding: whether there is a parent, its key, the token
    /// count, then each token (little-endian).
    pub fn chain(parent: Option<BlockHash>, tokens: &[u32]) -> Self {
        let mut h = Sha256::new();
        match parent {
            Some(p) => {
                h.update([1u8]);
                h.update(p.0);
            }
            None => h.update([0u8]),
        }
        h.update((tokens.len() as u64).to_le_bytes());
        for t in tokens {
            h.update(t.to_le_bytes());
        }
        Self(h.finalize().into())
    }

    /// The key as a 64-bit integer, the form vLLM's KV-cache events carry (its default,
    /// `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`): the SHA-256 digest read as a big-endian
    /// integer and cut to its low 64 bits (`int.from_bytes(h, "big") & (2**64 - 1)`),
    /// that is, its last 8 bytes big-endian.
    pub fn external(&self) -> u64 {
        let mut low = [0u8; 8];
        low.copy_from_slice(&self.0[24..]);
        u64::from_be_bytes(low)
    }

    /// Hashes of every full block of `tokens`.
    pub fn of_full_blocks(tokens: &[u32], block_size: usize) -> Vec<BlockHash> {
        let mut parent = None;
        tokens
            .chunks_exact(block_size)
            .map(|chunk| {
                let h = BlockHash::chain(parent, chunk);
                parent = Some(h);
                h
            })
            .collect()
    }
}

#[derive(Debug, Default, Clone)]
struct Block {
    ref_count: u32,
    /// Set once the block is full and computed; cleared when it is reused for new content.
    cached: Option<CachedContent>,
    /// Its key in the free pool while `ref_count == 0`.
    free_since: Option<FreeKey>,
}

/// A free block's place in the pool's order (see `BlockManager::free`): empty blocks
/// before cached ones, by freeing tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FreeKey {
    Empty(std::cmp::Reverse<u64>),
    Cached(u64),
}

#[derive(Debug, Clone)]
struct CachedContent {
    hash: BlockHash,
    /// The key of the block before it (`None` for a prompt's first block). Its KV depends
    /// on every earlier token, so a hit must follow the same parent.
    parent: Option<BlockHash>,
    /// Kept to rule out hash collisions: a hit must match token for token.
    tokens: Vec<u32>,
}

pub struct BlockManager {
    block_size: usize,
    blocks: Vec<Block>,
    /// Free blocks in the order `allocate` hands them out: first those with no cached
    /// content, most recently freed first (their pages were touched and may still be in
    /// cache, where a never-used block's first write faults its pages in), then cached
    /// ones, least recently freed first, so a cached block's content is evicted only when
    /// no empty block is left. Cached free blocks stay reusable by content until then.
    free: BTreeMap<FreeKey, BlockId>,
    next_tick: u64,
    by_hash: HashMap<BlockHash, BlockId>,
    prefix_caching: bool,
    /// Changes to the set of cached blocks not yet taken; `None` until `enable_events`.
    events: Option<Vec<KvEvent>>,
}

impl BlockManager {
    pub fn new(num_blocks: usize, block_size: usize, prefix_caching: bool) -> Self {
        let mut manager = Self {
            block_size,
            blocks: vec![Block::default(); num_blocks],
            free: BTreeMap::new(),
            next_tick: 0,
            by_hash: HashMap::new(),
            prefix_caching,
            events: None,
        };
        // Last pushed is handed out first: a fresh pool hands out blocks 0, 1, 2, …
        for i in (0..num_blocks).rev() {
            manager.push_free(BlockId(i as u32));
        }
        manager
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    pub fn prefix_caching(&self) -> bool {
        self.prefix_caching
    }

    /// Fraction of blocks held by some sequence (cached free blocks count as free).
    pub fn usage(&self) -> f64 {
        if self.blocks.is_empty() {
            return 0.0;
        }
        1.0 - self.num_free() as f64 / self.blocks.len() as f64
    }

    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.blocks[id.index()].ref_count
    }

    /// The longest run of leading full blocks of `tokens` already in the cache. Each hit
    /// holds the same tokens and follows the block hit before it, so the whole prefix is
    /// verified by content, whatever the keys.
    pub fn lookup_prefix(&self, tokens: &[u32], hashes: &[BlockHash]) -> Vec<BlockId> {
        if !self.prefix_caching {
            return Vec::new();
        }
        let mut hits = Vec::new();
        let mut parent = None;
        for (i, hash) in hashes.iter().enumerate() {
            let want = &tokens[i * self.block_size..(i + 1) * self.block_size];
            let verified = |c: &CachedContent| c.parent == parent && c.tokens == want;
            match self.by_hash.get(hash) {
                Some(&id)
                    if self.blocks[id.index()]
                        .cached
                        .as_ref()
                        .is_some_and(verified) =>
                {
                    hits.push(id);
                    parent = Some(*hash);
                }
                _ => break,
            }
        }
        hits
    }

    /// How many of `ids` sit in the free pool (taking them shrinks what `allocate` can give).
    pub fn count_free(&self, ids: &[BlockId]) -> usize {
        ids.iter()
            .filter(|id| self.blocks[id.index()].ref_count == 0)
            .count()
    }

    /// Takes another reference to a block (a prefix-cache hit).
    pub fn acquire(&mut self, id: BlockId) {
        let block = &mut self.blocks[id.index()];
        if let Some(tick) = block.free_since.take() {
            self.free.remove(&tick);
        }
        block.ref_count += 1;
    }

    /// `n` fresh blocks, or `None` (and no change) if the pool has fewer free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.free.len() {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (_, id) = self.free.pop_first()?;
            let block = &mut self.blocks[id.index()];
            block.free_since = None;
            block.ref_count = 1;
            if let Some(old) = block.cached.take() {
                // Evicted: its content is about to be overwritten.
                if self.by_hash.get(&old.hash) == Some(&id) {
                    self.by_hash.remove(&old.hash);
                    if let Some(events) = &mut self.events {
                        record_removed(events, old.hash);
                    }
                }
            }
            out.push(id);
        }
        Some(out)
    }

    /// Drops one reference; at zero the block joins the free pool, keeping its cached content.
    pub fn release(&mut self, id: BlockId) {
        let block = &mut self.blocks[id.index()];
        assert!(block.ref_count > 0, "release of free block {id:?}");
        block.ref_count -= 1;
        if block.ref_count == 0 {
            self.push_free(id);
        }
    }

    /// Records that a held block is full with `tokens` after the block keyed `parent`, so
    /// later prompts with the same prefix can share it. Returns the block's key.
    pub fn register_full(
        &mut self,
        id: BlockId,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) -> BlockHash {
        let hash = BlockHash::chain(parent, tokens);
        self.register_keyed(id, hash, parent, tokens);
        hash
    }

    /// `register_full` with the key given, so tests can forge a key collision.
    #[doc(hidden)]
    pub fn register_keyed(
        &mut self,
        id: BlockId,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) {
        if !self.prefix_caching || self.by_hash.contains_key(&hash) {
            return;
        }
        if let Some(events) = &mut self.events {
            record_stored(events, hash, parent, tokens, self.block_size);
        }
        self.blocks[id.index()].cached = Some(CachedContent {
            hash,
            parent,
            tokens: tokens.to_vec(),
        });
        self.by_hash.insert(hash, id);
    }

    /// How many blocks the prefix cache can hand out by content.
    pub fn num_cached(&self) -> usize {
        self.by_hash.len()
    }

    /// The external hashes ([`BlockHash::external`]) of every block the prefix cache can
    /// hand out by content, in no particular order: what applying every event rebuilds.
    pub fn cached_hashes(&self) -> Vec<u64> {
        self.by_hash.keys().map(BlockHash::external).collect()
    }

    /// Starts recording changes to the set of cached blocks. The first events say what is
    /// cached already: `AllBlocksCleared` (a subscriber holding a view of an earlier run
    /// starts afresh), then a `BlockStored` per cached block, each parent before its child.
    /// Calling it again starts the record afresh the same way.
    pub fn enable_events(&mut self) {
        let mut events = vec![KvEvent::AllBlocksCleared];
        // A block's depth is how many of its ancestors are still cached: sorted by it, every
        // cached parent comes before its children.
        let depth = |mut hash: BlockHash| {
            let mut n = 0usize;
            while let Some(parent) = self.by_hash.get(&hash).and_then(|&id| {
                let cached = self.blocks[id.index()].cached.as_ref()?;
                cached.parent.filter(|p| self.by_hash.contains_key(p))
            }) {
                n += 1;
                hash = parent;
            }
            n
        };
        let mut cached: Vec<(usize, BlockId)> = self
            .by_hash
            .iter()
            .map(|(&hash, &id)| (depth(hash), id))
            .collect();
        cached.sort_unstable();
        for (_, id) in cached {
            if let Some(c) = &self.blocks[id.index()].cached {
                events.push(KvEvent::BlockStored {
                    block_hashes: vec![c.hash.external()],
                    parent_block_hash: c.parent.map(|p| p.external()),
                    token_ids: c.tokens.clone(),
                    block_size: self.block_size,
                });
            }
        }
        self.events = Some(events);
    }

    /// The changes recorded since the last call, oldest first (empty, and nothing
    /// allocated, while events are off or nothing changed).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn push_free(&mut self, id: BlockId) {
        let tick = self.next_tick;
        self.next_tick += 1;
        let block = &mut self.blocks[id.index()];
        let key = if block.cached.is_some() {
            FreeKey::Cached(tick)
        } else {
            FreeKey::Empty(std::cmp::Reverse(tick))
        };
        block.free_since = Some(key);
        self.free.insert(key, id);
    }

    /// Checks internal consistency; `Err` describes the first violation. Used by tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (i, b) in self.blocks.iter().enumerate() {
            let in_free = b
                .free_since
                .is_some_and(|t| self.free.get(&t) == Some(&BlockId(i as u32)));
            if (b.ref_count == 0) != in_free {
                return Err(format!(
                    "block {i}: ref_count {} but in free list: {in_free}",
                    b.ref_count
                ));
            }
        }
        for (hash, id) in &self.by_hash {
            if self.blocks[id.index()].cached.as_ref().map(|c| c.hash) != Some(*hash) {
                return Err(format!(
                    "hash index points at block {id:?} with other content"
                ));
            }
        }
        Ok(())
    }
}

/// Records a block entering the cache, extending the last event when it stored this
/// block's parent (a prompt's blocks registered in one step make one event, as vLLM sends).
fn record_stored(
    events: &mut Vec<KvEvent>,
    hash: BlockHash,
    parent: Option<BlockHash>,
    tokens: &[u32],
    block_size: usize,
) {
    let parent = parent.map(|p| p.external());
    if let (
        Some(KvEvent::BlockStored {
            block_hashes,
            token_ids,
            ..
        }),
        Some(parent),
    ) = (events.last_mut(), parent)
    {
        if block_hashes.last() == Some(&parent) {
            block_hashes.push(hash.external());
            token_ids.extend_from_slice(tokens);
            return;
        }
    }
    events.push(KvEvent::BlockStored {
        block_hashes: vec![hash.external()],
        parent_block_hash: parent,
        token_ids: tokens.to_vec(),
        block_size,
    });
}

/// Records a cached block's eviction, extending the last event when it too was a removal.
fn record_removed(events: &mut Vec<KvEvent>, hash: BlockHash) {
    match events.last_mut() {
        Some(KvEvent::BlockRemoved { block_hashes }) => block_hashes.push(hash.external()),
        _ => events.push(KvEvent::BlockRemoved {
            block_hashes: vec![hash.external()],
        }),
    }
}
