//! `KvEvent`: a change to the set of prefix-cached blocks, as vLLM reports KV-cache events
//! (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`), in plain data.
//!
//! A subscriber that applies every event in order holds exactly the set of blocks the
//! prefix cache can hand out by content: `BlockStored` adds its hashes, `BlockRemoved`
//! drops them, `AllBlocksCleared` empties the set. Hashes are the 64-bit external form of
//! the cache's SHA-256 keys ([`BlockHash::external`](crate::kv::block_manager::BlockHash::external)).

/// One change to the prefix cache's set of blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// Blocks that became reusable by content: a run along one prefix, each block the child
    /// of the one before it, the first the child of `parent_block_hash` (`None`: a prompt's
    /// first block). `token_ids` holds the run's tokens, `block_size` per block.
    BlockStored {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: usize,
    },
    /// Blocks the disk tier (`--kv-offload-dir`) wrote, a run along one prefix as in
    /// `BlockStored`: vLLM's `BlockStored` with another `medium`. They describe the second
    /// tier, not the set RAM hands out: they stay findable after RAM evicts them, and no
    /// event says when the tier's size cap deletes them.
    BlockStoredOnDisk {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: usize,
    },
    /// Blocks whose content was evicted (their memory is reused for other tokens).
    BlockRemoved { block_hashes: Vec<u64> },
    /// Block files the disk tier deleted (its size cap, `--kv-offload-max-gib`, or a file
    /// refused on reading): vLLM's `BlockRemoved` with the disk tier's `medium`.
    BlockRemovedFromDisk { block_hashes: Vec<u64> },
    /// Every block was dropped from the set.
    AllBlocksCleared,
}

/// Where the engine hands each step's events (never an empty batch). It runs on the engine
/// thread, between steps: it must not block (send to a bounded channel with `try_send`).
pub type KvEventSink = Box<dyn FnMut(Vec<KvEvent>) + Send + Sync>;

/// Records a block entering the cache, extending the last event when it stored this
/// block's parent (a prompt's blocks registered in one step make one event, as vLLM sends).
pub(crate) fn record_stored(
    events: &mut Vec<KvEvent>,
    hash: u64,
    parent: Option<u64>,
    tokens: &[u32],
    block_size: usize,
) {
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
            block_hashes.push(hash);
            token_ids.extend_from_slice(tokens);
            return;
        }
    }
    events.push(KvEvent::BlockStored {
        block_hashes: vec![hash],
        parent_block_hash: parent,
        token_ids: tokens.to_vec(),
        block_size,
    });
}

/// Records a cached block's eviction, extending the last event when it too was a removal.
pub(crate) fn record_removed(events: &mut Vec<KvEvent>, hash: u64) {
    match events.last_mut() {
        Some(KvEvent::BlockRemoved { block_hashes }) => block_hashes.push(hash),
        _ => events.push(KvEvent::BlockRemoved {
            block_hashes: vec![hash],
        }),
    }
}
