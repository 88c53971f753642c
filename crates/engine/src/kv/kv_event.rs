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

/// Which tier an event describes: RAM's prefix cache (vLLM's `BlockStored`/`BlockRemoved`)
/// or the disk tier (the `...OnDisk`/`...FromDisk` variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tier {
    Ram,
    Disk,
}

/// A full block entering a tier, as `record_stored` takes it.
pub(crate) struct StoredBlock<'a> {
    pub hash: u64,
    pub parent: Option<u64>,
    pub tokens: &'a [u32],
    pub block_size: usize,
}

/// Records a block entering `tier`, extending the last event when it stored this block's
/// parent in the same tier (a prompt's blocks registered in one step make one event, as
/// vLLM sends).
pub(crate) fn record_stored(events: &mut Vec<KvEvent>, tier: Tier, block: StoredBlock<'_>) {
    let run = match (events.last_mut(), tier) {
        (
            Some(KvEvent::BlockStored {
                block_hashes,
                token_ids,
                ..
            }),
            Tier::Ram,
        )
        | (
            Some(KvEvent::BlockStoredOnDisk {
                block_hashes,
                token_ids,
                ..
            }),
            Tier::Disk,
        ) => Some((block_hashes, token_ids)),
        _ => None,
    };
    if let (Some((block_hashes, token_ids)), Some(parent)) = (run, block.parent) {
        if block_hashes.last() == Some(&parent) {
            block_hashes.push(block.hash);
            token_ids.extend_from_slice(block.tokens);
            return;
        }
    }
    let (block_hashes, parent_block_hash, token_ids, block_size) = (
        vec![block.hash],
        block.parent,
        block.tokens.to_vec(),
        block.block_size,
    );
    events.push(match tier {
        Tier::Ram => KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
        },
        Tier::Disk => KvEvent::BlockStoredOnDisk {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
        },
    });
}

/// Records a block leaving `tier`, extending the last event when it too was a removal from
/// that tier.
pub(crate) fn record_removed(events: &mut Vec<KvEvent>, tier: Tier, hash: u64) {
    match (events.last_mut(), tier) {
        (Some(KvEvent::BlockRemoved { block_hashes }), Tier::Ram)
        | (Some(KvEvent::BlockRemovedFromDisk { block_hashes }), Tier::Disk) => {
            block_hashes.push(hash)
        }
        (_, Tier::Ram) => events.push(KvEvent::BlockRemoved {
            block_hashes: vec![hash],
        }),
        (_, Tier::Disk) => events.push(KvEvent::BlockRemovedFromDisk {
            block_hashes: vec![hash],
        }),
    }
}
