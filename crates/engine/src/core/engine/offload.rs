//! The engine's side of the disk tier (`--kv-offload-dir`): opening it, copying each block
//! that enters the prefix cache to its writer after `update`, and copying pages read from
//! it into the KV cache before `schedule`.
//!
//! A model with several KV cache groups (sliding-window layers beside full ones, as
//! gemma-3) stores a block as one file holding every group's page for that block position,
//! group after group: a block is written only once each group has its page cached, and a
//! read fills the pages of the groups the reading sequence needs (a sliding group's only
//! within the window before the prefix's end). One file per position keeps the chained key,
//! the lookup and the cap as they are for one group; the price is that a sliding group's
//! pages far behind the window are stored though a hit never reads them.

use super::Engine;
use crate::error::{EngineError, Result};
use crate::kv::disk_block::DiskBlock;
use crate::kv::kv_disk_tier::{
    DiskChange, KvDiskStats, KvDiskTier, KvLayout, KvOffloadConfig, ReadHold,
};
use crate::kv::kv_event::{record_removed, record_stored, KvEvent, StoredBlock, Tier};

impl Engine {
    /// Writes every block that enters the prefix cache through to `config.dir` and takes
    /// prefix hits from the files there (this engine's and any earlier or parallel one's
    /// with the same fingerprint). Off, with a log line saying why, when prefix caching is
    /// off. A directory that cannot be written leaves a tier that only reads.
    pub fn enable_kv_offload(&mut self, config: &KvOffloadConfig) {
        let groups = self.model_config().kv_cache_groups();
        if !self.scheduler.block_manager().prefix_caching() {
            tracing::warn!("KV offload: off, prefix caching is off");
            return;
        }
        let layout = KvLayout {
            description: format!(
                "{:?} KV; groups {groups:?}; model {:?}",
                self.runner.kv_dtype(),
                self.model_config()
            ),
            block_size: self.limits.block_size,
            // Every group's page of the block position, group after group.
            page_bytes: self.runner.kv_page_bytes() * groups.num_groups(),
        };
        let tier = KvDiskTier::open(config, &layout);
        if tier.is_writing() {
            self.scheduler.block_manager_mut().enable_offload();
        }
        self.scheduler.set_disk_tier(tier);
    }

    /// The disk tier's counters, if it is on.
    pub fn kv_offload_stats(&self) -> Option<KvDiskStats> {
        self.scheduler.disk_tier().map(KvDiskTier::stats)
    }

    /// Test support: the disk tier's reader starts no read until the hold is dropped, so a
    /// test can step the engine while a request's reads are in flight.
    #[doc(hidden)]
    pub fn hold_kv_offload_reads(&self) -> Option<ReadHold> {
        self.scheduler.disk_tier().map(KvDiskTier::hold_reads)
    }

    /// Waits until every block handed to the disk tier so far is on disk (tests, and a
    /// clean shutdown, which dropping the engine does too).
    pub fn flush_kv_offload(&mut self) {
        if let Some(tier) = self.scheduler.disk_tier_mut() {
            tier.flush();
        }
    }

    /// Copies the pages whose reads from disk finished into the KV cache. Called before
    /// `schedule`, on the engine thread, while no forward pass runs: the reader thread
    /// filled buffers of its own, and these pages' requests join a batch only after this.
    pub(super) fn load_pages(&mut self) -> Result<()> {
        for load in self.scheduler.finish_loads() {
            if !self.runner.copy_page_in(load.block, &load.page) {
                // The tier checks every page's size on reading; this would be a bug.
                return Err(EngineError::InvalidRequest(format!(
                    "a page read from the KV offload directory has {} bytes, not {}",
                    load.page.len(),
                    self.runner.kv_page_bytes()
                )));
            }
        }
        Ok(())
    }

    /// Hands each block registered in this step's `update` to the disk tier's writer: a
    /// copy of every group's page of it, never a wait on the disk. A block some group has
    /// no cached page of is not written (a later registration of that page writes it).
    pub(super) fn offload_blocks(&mut self) {
        let registered = self.scheduler.block_manager_mut().take_offload();
        let Some(tier) = self.scheduler.disk_tier() else {
            return;
        };
        let blocks = self.scheduler.block_manager();
        let num_groups = blocks.groups().num_groups();
        let mut last = None;
        for block in registered {
            // A block registered in several groups at once is listed once per group.
            if last.replace(block.hash) == Some(block.hash) {
                continue;
            }
            let pages: Option<Vec<_>> = (0..num_groups)
                .map(|g| blocks.cached_page(g, block.hash))
                .collect();
            let Some(pages) = pages else {
                continue;
            };
            let mut page = Vec::with_capacity(self.runner.kv_page_bytes() * num_groups);
            for id in pages {
                self.runner.copy_page_out(id, &mut page);
            }
            tier.store(DiskBlock {
                hash: block.hash,
                parent: block.parent,
                tokens: block.tokens,
                page,
            });
        }
    }

    /// The blocks the disk tier wrote and the files it deleted since the last call, as
    /// events (a run along one prefix per stored event, as RAM's are, and a run of
    /// deletions per removed one); empty while no event sink is set.
    pub(super) fn disk_events(&self) -> Vec<KvEvent> {
        let Some(tier) = self.scheduler.disk_tier() else {
            return Vec::new();
        };
        let block_size = self.limits.block_size;
        let mut events: Vec<KvEvent> = Vec::new();
        for change in tier.take_changes() {
            match change {
                DiskChange::Written(block) => {
                    let block = StoredBlock {
                        hash: block.hash.external(),
                        parent: block.parent.map(|p| p.external()),
                        tokens: &block.tokens,
                        block_size,
                    };
                    record_stored(&mut events, Tier::Disk, block);
                }
                DiskChange::Removed(hash) => {
                    record_removed(&mut events, Tier::Disk, hash.external());
                }
            }
        }
        events
    }
}
