//! Prefix hits from the disk tier: how many blocks after a prompt's RAM hit the tier holds,
//! and reading them into the pages admission gave them.
//!
//! This first version reads at admission, on the engine thread, before the step's forward
//! pass: the step that admits a prompt pays its disk hit's reads (page-cache speed for a
//! recently written directory), where computing those blocks would cost their prefill.

use super::Scheduler;
use crate::kv::block_manager::BlockHash;
use crate::kv::kv_disk_tier::KvDiskTier;
use crate::sched::scheduler_output::{PageLoad, SchedulerOutput};
use crate::sched::sequence::Sequence;
use std::ops::Range;

impl Scheduler {
    /// Hands the prefix cache a tier on disk: later admissions take hits from it.
    pub fn set_disk_tier(&mut self, disk: KvDiskTier) {
        self.disk = Some(disk);
    }

    /// The disk tier, if there is one.
    pub fn disk_tier(&self) -> Option<&KvDiskTier> {
        self.disk.as_ref()
    }

    /// The disk tier, to flush its writer.
    pub fn disk_tier_mut(&mut self) -> Option<&mut KvDiskTier> {
        self.disk.as_mut()
    }

    /// How many blocks from `first` on (up to `most`) have a file in the disk tier, in a
    /// row: each follows the one before, so the run stops at the first missing.
    pub(super) fn disk_run(&self, hashes: &[BlockHash], first: usize, most: usize) -> usize {
        let Some(disk) = &self.disk else {
            return 0;
        };
        let end = most.min(hashes.len());
        (first..end.max(first))
            .take_while(|&b| disk.contains(hashes[b]))
            .count()
    }

    /// Reads blocks `blocks` of `seq` (whose pages it holds, in its only group's table) from
    /// disk, registers each page as cached and queues its bytes for the engine to copy in
    /// before the forward pass; stops at the first block whose file is gone or fails its
    /// checks. Returns how many were loaded.
    pub(super) fn load_from_disk(
        &mut self,
        seq: &Sequence,
        hashes: &[BlockHash],
        blocks: Range<usize>,
        out: &mut SchedulerOutput,
    ) -> usize {
        let Some(disk) = &self.disk else {
            return 0;
        };
        let bs = self.blocks.block_size();
        let mut loaded = 0;
        for b in blocks {
            let tokens = &seq.tokens[b * bs..(b + 1) * bs];
            let parent = b.checked_sub(1).map(|p| hashes[p]);
            let Some(id) = seq.block_tables.first().and_then(|t| t.get(b)) else {
                break;
            };
            let Some(page) = disk.read(hashes[b], parent, tokens) else {
                break;
            };
            self.blocks
                .register_loaded(0, id, hashes[b], parent, tokens);
            out.loads.push(PageLoad { block: id, page });
            loaded += 1;
        }
        loaded
    }
}
