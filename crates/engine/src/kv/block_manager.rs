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
//! Pages of every KV cache group ([`KvCacheGroups`]) share the one pool, so memory moves
//! between groups as sequences grow: a block of tokens takes a page in each group, and a
//! sliding group's pages are released once its window has passed them (counting and
//! releasing them is here; who gets pages stays the scheduler's). Prefix-cache keys are
//! per group, `(group, BlockHash)`: the same tokens have a page in each group, and a hit
//! needs the full groups' blocks from the start and each sliding group's blocks of the
//! window before the first position computed.
//!
//! Once `enable_events` is called it also records each change to the set of cached blocks
//! as a [`KvEvent`] (a block registered, a cached block evicted), for `take_events` to hand
//! on; until then nothing is recorded and nothing allocated. Only the full-attention
//! group's blocks are reported: its blocks are the prefix a router can send a prompt to
//! (a sliding group's page is only useful beside them), and it holds one per block.

use crate::config::{KvCacheGroups, KvGroup};
pub use crate::kv::block_id::BlockId;
use crate::kv::block_table::BlockTable;
use crate::kv::kv_event::{record_removed, record_stored, KvEvent, StoredBlock, Tier};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};

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

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key in lowercase hex (64 characters), as the disk tier names its files.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key [`to_hex`](Self::to_hex) wrote; `None` for any other text.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut key = [0u8; 32];
        for (byte, pair) in key.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(Self(key))
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
    /// The group whose layers' KV the page holds.
    group: KvGroup,
    hash: BlockHash,
    /// The key of the block before it (`None` for a prompt's first block). Its KV depends
    /// on every earlier token, so a hit must follow the same parent.
    parent: Option<BlockHash>,
    /// Kept to rule out hash collisions: a hit must match token for token.
    tokens: Vec<u32>,
}

/// A prefix-cache hit: `blocks` leading blocks of a prompt, and per group the table of the
/// cached pages its computation needs (not yet acquired).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixHit {
    pub blocks: usize,
    pub tables: Vec<BlockTable>,
}

impl PrefixHit {
    /// Every page of the hit, group after group.
    pub fn ids(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.tables.iter().flat_map(|t| t.held().iter().copied())
    }
}

pub struct BlockManager {
    block_size: usize,
    groups: KvCacheGroups,
    /// The group whose cached blocks the events describe: the first full one.
    events_group: KvGroup,
    blocks: Vec<Block>,
    /// Free blocks in the order `allocate` hands them out: first those with no cached
    /// content, most recently freed first (their pages were touched and may still be in
    /// cache, where a never-used block's first write faults its pages in), then cached
    /// ones, least recently freed first, so a cached block's content is evicted only when
    /// no empty block is left. Cached free blocks stay reusable by content until then.
    free: BTreeMap<FreeKey, BlockId>,
    next_tick: u64,
    by_hash: HashMap<(KvGroup, BlockHash), BlockId>,
    prefix_caching: bool,
    /// Changes to the set of cached blocks not yet taken; `None` until `enable_events`.
    events: Option<Vec<KvEvent>>,
    /// Blocks computed and registered since the last `take_offload`, for a disk tier to
    /// copy; `None` until `enable_offload`.
    offload: Option<Vec<RegisteredBlock>>,
}

/// A block that entered the prefix cache: where its page is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredBlock {
    pub id: BlockId,
    pub hash: BlockHash,
    pub parent: Option<BlockHash>,
    pub tokens: Vec<u32>,
}

impl BlockManager {
    /// A pool for one group of every layer (one block table per sequence).
    pub fn new(num_blocks: usize, block_size: usize, prefix_caching: bool) -> Self {
        Self::with_groups(
            num_blocks,
            block_size,
            prefix_caching,
            KvCacheGroups::single(1),
        )
    }

    /// A pool of `num_blocks` pages shared by every group of `groups`.
    pub fn with_groups(
        num_blocks: usize,
        block_size: usize,
        prefix_caching: bool,
        groups: KvCacheGroups,
    ) -> Self {
        let mut manager = Self {
            block_size,
            events_group: groups.full_group().unwrap_or(0),
            groups,
            blocks: vec![Block::default(); num_blocks],
            free: BTreeMap::new(),
            next_tick: 0,
            by_hash: HashMap::new(),
            prefix_caching,
            events: None,
            offload: None,
        };
        // Last pushed is handed out first: a fresh pool hands out blocks 0, 1, 2, …
        for i in (0..num_blocks).rev() {
            manager.push_free(BlockId::from_index(i as u32));
        }
        manager
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn groups(&self) -> &KvCacheGroups {
        &self.groups
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

    /// The longest prefix of at most `most` full blocks of `tokens` whose needed pages are
    /// all cached: every full group's blocks from the start, and each sliding group's blocks
    /// the first computed position's window reaches back to. Searched from the full groups'
    /// longest run down (vLLM's hybrid manager does the same, right to left), so a prompt
    /// whose sliding pages near its end were evicted gets a shorter hit. Each page holds the
    /// same tokens and follows the same parent key, so the prefix is verified by content,
    /// whatever the keys.
    pub fn lookup_prefix(&self, tokens: &[u32], hashes: &[BlockHash], most: usize) -> PrefixHit {
        let bs = self.block_size;
        let num_groups = self.groups.num_groups();
        let mut hit = PrefixHit {
            blocks: 0,
            tables: vec![BlockTable::default(); num_groups],
        };
        if !self.prefix_caching {
            return hit;
        }
        let cached = |group: KvGroup, b: usize| -> Option<BlockId> {
            let want = &tokens[b * bs..(b + 1) * bs];
            let parent = b.checked_sub(1).map(|p| hashes[p]);
            let &id = self.by_hash.get(&(group, hashes[b]))?;
            let c = self.blocks[id.index()].cached.as_ref()?;
            (c.group == group && c.parent == parent && c.tokens == want).then_some(id)
        };
        let mut h = hashes.len().min(most);
        let sliding: Vec<KvGroup> = (0..num_groups)
            .filter(|&g| self.groups.window(g).is_some())
            .collect();
        for g in (0..num_groups).filter(|&g| self.groups.window(g).is_none()) {
            h = (0..h).take_while(|&b| cached(g, b).is_some()).count();
        }
        // Per sliding group, how many blocks in a row are cached up to (excluding) each index.
        let runs: Vec<Vec<usize>> = sliding
            .iter()
            .map(|&g| {
                let mut run = vec![0; h + 1];
                for b in 0..h {
                    run[b + 1] = if cached(g, b).is_some() {
                        run[b] + 1
                    } else {
                        0
                    };
                }
                run
            })
            .collect();
        let needs = |h: usize| {
            sliding
                .iter()
                .zip(&runs)
                .all(|(&g, run)| run[h] >= h - self.groups.first_needed_block(g, h * bs, bs).min(h))
        };
        while h > 0 && !needs(h) {
            h -= 1;
        }
        hit.blocks = h;
        for (g, table) in hit.tables.iter_mut().enumerate() {
            let first = self.groups.first_needed_block(g, h * bs, bs).min(h);
            let ids = (first..h).map(|b| cached(g, b).expect("checked cached above"));
            *table = BlockTable::after_dropped(first, ids.collect());
        }
        hit
    }

    /// How many of `ids` sit in the free pool (taking them shrinks what `allocate` can give).
    pub fn count_free(&self, ids: impl IntoIterator<Item = BlockId>) -> usize {
        ids.into_iter()
            .filter(|id| self.blocks[id.index()].ref_count == 0)
            .count()
    }

    /// The first block of `group` a sequence whose next computed position is `computed`
    /// still needs (every later query sees no earlier one).
    fn first_needed(&self, group: KvGroup, computed: usize) -> usize {
        self.groups
            .first_needed_block(group, computed, self.block_size)
    }

    /// Pages [`allocate_to`](Self::allocate_to) takes for a sequence holding `tables`, with
    /// `computed` positions computed, to hold positions up to `end`: in every group the
    /// blocks up to `end` it does not cover yet, but in a sliding group none before the
    /// window of position `computed`.
    pub fn pages_needed(&self, tables: &[BlockTable], computed: usize, end: usize) -> usize {
        let blocks = end.div_ceil(self.block_size);
        (0..self.groups.num_groups())
            .map(|g| {
                let covered = tables.get(g).map_or(0, BlockTable::covered);
                blocks.saturating_sub(covered.max(self.first_needed(g, computed)))
            })
            .sum()
    }

    /// Takes the pages [`pages_needed`](Self::pages_needed) counts and adds them to
    /// `tables` (one per group, made if missing); `false`, and no page taken, when the pool
    /// is short. Blocks a sliding window has passed are released first (see
    /// [`release_outside_window`](Self::release_outside_window)).
    pub fn allocate_to(
        &mut self,
        tables: &mut Vec<BlockTable>,
        computed: usize,
        end: usize,
    ) -> bool {
        tables.resize(self.groups.num_groups(), BlockTable::default());
        self.release_outside_window(tables, computed);
        let need = self.pages_needed(tables, computed, end);
        let Some(mut fresh) = self.allocate(need) else {
            return false;
        };
        let blocks = end.div_ceil(self.block_size);
        for (g, table) in tables.iter_mut().enumerate() {
            table.skip_to(self.first_needed(g, computed));
            let n = blocks.saturating_sub(table.covered());
            table.extend(fresh.drain(..n));
        }
        debug_assert!(fresh.is_empty());
        true
    }

    /// Releases each sliding group's blocks that no query from position `computed` on can
    /// see; they keep their cached content (evictable, least recently used first), so a
    /// repeated prompt can still hit them. Returns the pages released.
    pub fn release_outside_window(&mut self, tables: &mut [BlockTable], computed: usize) -> usize {
        let mut released = 0;
        for (g, table) in tables.iter_mut().enumerate() {
            if self.groups.window(g).is_none() {
                continue;
            }
            for id in table.drop_before(self.first_needed(g, computed)) {
                self.release(id);
                released += 1;
            }
        }
        released
    }

    /// Releases every page of `tables` and empties them: sliding groups first and each
    /// table's tail first, so the least recently used order evicts a prompt's end before its
    /// shareable start.
    pub fn release_all(&mut self, tables: &mut Vec<BlockTable>) {
        let order = (0..tables.len())
            .rev()
            .filter(|&g| self.groups.window(g).is_some());
        let order: Vec<usize> = order
            .chain((0..tables.len()).filter(|&g| self.groups.window(g).is_none()))
            .collect();
        for g in order {
            for id in tables[g].take_all().into_iter().rev() {
                self.release(id);
            }
        }
        tables.clear();
    }

    /// The most tokens (up to `most`) a sequence holding `tables` with `computed` positions
    /// computed can add with `free` pages.
    pub fn tokens_that_fit(
        &self,
        tables: &[BlockTable],
        computed: usize,
        most: usize,
        free: usize,
    ) -> usize {
        let (mut lo, mut hi) = (0, most);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.pages_needed(tables, computed, computed + mid) <= free {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
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
                let key = (old.group, old.hash);
                if self.by_hash.get(&key) == Some(&id) {
                    self.by_hash.remove(&key);
                    if let Some(events) = self
                        .events
                        .as_mut()
                        .filter(|_| old.group == self.events_group)
                    {
                        record_removed(events, Tier::Ram, old.hash.external());
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

    /// Records that a held page of `group` is full with `tokens` after the block keyed
    /// `parent`, so later prompts with the same prefix can share it. Returns the block's key.
    pub fn register_full(
        &mut self,
        group: KvGroup,
        id: BlockId,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) -> BlockHash {
        let hash = BlockHash::chain(parent, tokens);
        self.register_keyed(group, id, hash, parent, tokens);
        hash
    }

    /// `register_full` with the key given (the scheduler hashes a block once for all its
    /// groups; tests forge a key collision).
    #[doc(hidden)]
    pub fn register_keyed(
        &mut self,
        group: KvGroup,
        id: BlockId,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) {
        if self.register(group, id, hash, parent, tokens) {
            if let Some(offload) = self.offload.as_mut() {
                offload.push(RegisteredBlock {
                    id,
                    hash,
                    parent,
                    tokens: tokens.to_vec(),
                });
            }
        }
    }

    /// Registers a page the disk tier filled (its content came from disk, so it is not
    /// handed back for writing). The page must be held, as a computed one is.
    pub fn register_loaded(
        &mut self,
        group: KvGroup,
        id: BlockId,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) {
        self.register(group, id, hash, parent, tokens);
    }

    /// Starts recording the blocks registered from computed KV, for `take_offload` to hand
    /// to a disk tier.
    pub fn enable_offload(&mut self) {
        self.offload = Some(Vec::new());
    }

    /// The blocks registered since the last call, oldest first (empty while offload is off).
    /// Their pages keep that content until the scheduler next allocates.
    pub fn take_offload(&mut self) -> Vec<RegisteredBlock> {
        self.offload
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Records the page as cached under `(group, hash)`; `false` when prefix caching is off
    /// or the key is cached already.
    fn register(
        &mut self,
        group: KvGroup,
        id: BlockId,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) -> bool {
        if !self.prefix_caching || self.by_hash.contains_key(&(group, hash)) {
            return false;
        }
        if let Some(events) = self.events.as_mut().filter(|_| group == self.events_group) {
            let block = StoredBlock {
                hash: hash.external(),
                parent: parent.map(|p| p.external()),
                tokens,
                block_size: self.block_size,
            };
            record_stored(events, Tier::Ram, block);
        }
        self.blocks[id.index()].cached = Some(CachedContent {
            group,
            hash,
            parent,
            tokens: tokens.to_vec(),
        });
        self.by_hash.insert((group, hash), id);
        true
    }

    /// The page of `group` the prefix cache holds for the block keyed `hash`, if any (its
    /// content stays until the page is next allocated).
    pub fn cached_page(&self, group: KvGroup, hash: BlockHash) -> Option<BlockId> {
        self.by_hash.get(&(group, hash)).copied()
    }

    /// How many pages the prefix cache can hand out by content, over every group.
    pub fn num_cached(&self) -> usize {
        self.by_hash.len()
    }

    /// The external hashes ([`BlockHash::external`]) of every block of the full-attention
    /// group the prefix cache can hand out by content, in no particular order: what
    /// applying every event rebuilds.
    pub fn cached_hashes(&self) -> Vec<u64> {
        self.by_hash
            .keys()
            .filter(|(g, _)| *g == self.events_group)
            .map(|(_, h)| h.external())
            .collect()
    }

    /// Starts recording changes to the set of cached blocks. The first events say what is
    /// cached already: `AllBlocksCleared` (a subscriber holding a view of an earlier run
    /// starts afresh), then a `BlockStored` per cached block, each parent before its child.
    /// Calling it again starts the record afresh the same way.
    pub fn enable_events(&mut self) {
        let mut events = vec![KvEvent::AllBlocksCleared];
        // A block's depth is how many of its ancestors are still cached: sorted by it, every
        // cached parent comes before its children.
        let group = self.events_group;
        let depth = |mut hash: BlockHash| {
            let mut n = 0usize;
            while let Some(parent) = self.by_hash.get(&(group, hash)).and_then(|&id| {
                let cached = self.blocks[id.index()].cached.as_ref()?;
                cached
                    .parent
                    .filter(|p| self.by_hash.contains_key(&(group, *p)))
            }) {
                n += 1;
                hash = parent;
            }
            n
        };
        let mut cached: Vec<(usize, BlockId)> = self
            .by_hash
            .iter()
            .filter(|((g, _), _)| *g == group)
            .map(|(&(_, hash), &id)| (depth(hash), id))
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
                .is_some_and(|t| self.free.get(&t) == Some(&BlockId::from_index(i as u32)));
            if (b.ref_count == 0) != in_free {
                return Err(format!(
                    "block {i}: ref_count {} but in free list: {in_free}",
                    b.ref_count
                ));
            }
        }
        for ((group, hash), id) in &self.by_hash {
            let cached = self.blocks[id.index()].cached.as_ref();
            if cached.map(|c| (c.group, c.hash)) != Some((*group, *hash)) {
                return Err(format!(
                    "hash index of group {group} points at block {id:?} with other content"
                ));
            }
        }
        Ok(())
    }

    /// [`check_invariants`](Self::check_invariants), and that `tables` (every running
    /// sequence's, one per group) hold each page exactly as often as its reference count
    /// says, no table of a group that does not exist. Used by tests.
    pub fn check_tables<'a>(
        &self,
        tables: impl IntoIterator<Item = &'a [BlockTable]>,
    ) -> Result<(), String> {
        self.check_invariants()?;
        let mut refs = vec![0u32; self.blocks.len()];
        for seq in tables {
            if seq.len() > self.groups.num_groups() {
                return Err(format!(
                    "a sequence has {} tables but there are {} groups",
                    seq.len(),
                    self.groups.num_groups()
                ));
            }
            for id in seq.iter().flat_map(|t| t.held()) {
                refs[id.index()] += 1;
            }
        }
        for (i, (b, r)) in self.blocks.iter().zip(refs).enumerate() {
            if b.ref_count != r {
                return Err(format!(
                    "block {i}: ref_count {} but held by {r} table entries",
                    b.ref_count
                ));
            }
        }
        Ok(())
    }
}
