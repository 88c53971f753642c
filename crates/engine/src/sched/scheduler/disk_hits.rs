//! Prefix hits from the disk tier: how many blocks after a prompt's RAM hit the tier holds,
//! and the loads that bring them back while other requests run.
//!
//! A prompt whose prefix continues on disk is admitted into `loading`, not `running`: it
//! holds the pages for those blocks (unregistered, so no lookup hands them to anyone, and
//! held, so no allocation reuses them), and the tier's reader thread reads the files. The
//! running requests keep stepping meanwhile. Once the read is back (`finish_loads`, which
//! the engine calls before a later step's `schedule`) each page that came back is
//! registered as cached and handed to the engine to copy in at once, before anything is
//! scheduled (so no preemption in that step can free a page before it is filled); the
//! request joins the running ones as a prefill from the first block that did not come back
//! (a file that vanished or failed its checks after the lookup is computed instead).

use super::Scheduler;
use crate::kv::block_manager::BlockHash;
use crate::kv::kv_disk_tier::{BlockToRead, KvDiskTier, ReadDone, ReadId};
use crate::sched::scheduler_output::PageLoad;
use crate::sched::sequence::Sequence;
use std::time::Duration;

/// How long a step with nothing to run waits for a read to finish before it returns (the
/// engine loop then looks for commands and steps again).
const IDLE_READ_WAIT: Duration = Duration::from_millis(20);

/// A request whose prefix is being read back from disk.
pub(super) struct Loading {
    pub seq: Sequence,
    /// Every full block's key of its tokens (as admission hashed them).
    pub hashes: Vec<BlockHash>,
    /// Blocks `first..first + blocks` are being read (the ones before were a RAM hit).
    pub first: usize,
    pub blocks: usize,
    /// Whether this is the request's first admission (its prefix-cache counters wait for
    /// the read's result).
    pub first_admission: bool,
}

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

    /// Requests waiting for their prefix's reads from disk.
    pub fn num_loading(&self) -> usize {
        self.loading.len()
    }

    /// How many blocks from `first` on (up to `most`) have a file in the disk tier, in a
    /// row: each follows the one before, so the run stops at the first missing.
    pub(super) fn disk_run(&self, hashes: &[BlockHash], first: usize, most: usize) -> usize {
        let Some(disk) = &self.disk else {
            return 0;
        };
        let end = most.min(hashes.len());
        (first..end.max(first))
            .take_while(|&b| !self.failed_on_disk.contains(&hashes[b]) && disk.contains(hashes[b]))
            .count()
    }

    /// Starts reading `loading`'s blocks into buffers (its pages are held already) and
    /// parks it until the read is back.
    pub(super) fn start_load(&mut self, loading: Loading) {
        let Some(disk) = &self.disk else {
            unreachable!("a disk run is found only with a tier");
        };
        let bs = self.blocks.block_size();
        let seq = &loading.seq;
        let blocks = (loading.first..loading.first + loading.blocks)
            .map(|b| BlockToRead {
                hash: loading.hashes[b],
                parent: b.checked_sub(1).map(|p| loading.hashes[p]),
                tokens: seq.tokens[b * bs..(b + 1) * bs].to_vec(),
            })
            .collect();
        disk.start_read(ReadId(seq.id.0), blocks);
        self.loading.push(loading);
    }

    /// Takes the reads finished since the last call: each one's request joins the running
    /// ones, and the pages that came back are returned for the engine to copy in before it
    /// calls [`schedule`](Self::schedule).
    pub fn finish_loads(&mut self) -> Vec<PageLoad> {
        let mut done = std::mem::take(&mut self.reads_done);
        if let Some(disk) = self.disk.as_ref().filter(|_| !self.loading.is_empty()) {
            done.extend(disk.finished_reads(None));
        }
        let mut loads = Vec::new();
        for read in done {
            self.finish_load(read, &mut loads);
        }
        loads
    }

    /// For a step with nothing to run while reads are in flight: waits briefly for one to
    /// finish (kept for the next [`finish_loads`](Self::finish_loads)), so the engine loop
    /// does not spin while the disk works.
    pub fn wait_for_loads(&mut self) {
        if let Some(disk) = self.disk.as_ref().filter(|_| !self.loading.is_empty()) {
            let done = disk.finished_reads(Some(IDLE_READ_WAIT));
            self.reads_done.extend(done);
        }
    }

    fn finish_load(&mut self, read: ReadDone, loads: &mut Vec<PageLoad>) {
        // An aborted request's read finds nothing to fill: its pages are free already.
        let Some(i) = self.loading.iter().position(|l| l.seq.id.0 == read.id.0) else {
            return;
        };
        let Loading {
            mut seq,
            hashes,
            first,
            blocks,
            first_admission,
        } = self.loading.swap_remove(i);
        let bs = self.blocks.block_size();
        debug_assert!(read.pages.len() <= blocks);
        let loaded = read.pages.len().min(blocks);
        let num_groups = seq.block_tables.len().max(1);
        for (b, page) in (first..first + loaded).zip(read.pages) {
            let tokens = &seq.tokens[b * bs..(b + 1) * bs];
            let parent = b.checked_sub(1).map(|p| hashes[p]);
            // The file holds every group's page, group after group; the sequence holds a
            // page of each full group and of each sliding group whose window reaches it.
            let group_bytes = page.len() / num_groups;
            for (g, table) in seq.block_tables.iter().enumerate() {
                let Some(id) = table.get(b) else {
                    continue;
                };
                self.blocks
                    .register_loaded(g, id, hashes[b], parent, tokens);
                let bytes = page[g * group_bytes..(g + 1) * group_bytes].to_vec();
                loads.push(PageLoad {
                    block: id,
                    page: bytes,
                });
            }
        }
        if loaded < blocks && num_groups > 1 {
            // A sliding group holds pages only for the window before the whole run's end:
            // the window before a shorter run's end has none. The pages that came back are
            // cached now; the prompt goes back to waiting, and its next admission finds
            // them in RAM and never looks for the block that failed on disk again.
            self.failed_on_disk.insert(hashes[first + loaded]);
            self.free_blocks(&mut seq);
            seq.num_computed = 0;
            if first_admission {
                seq.timings.first_scheduled = None;
            }
            self.waiting.push_front(seq);
            return;
        }
        let cached = (first + loaded) * bs;
        seq.num_computed = cached;
        seq.block_hashes = hashes[..first + loaded].to_vec();
        if first_admission {
            seq.cached_prompt_tokens = cached;
            self.count_first_admission(&seq, (cached, loaded * bs), hashes.first());
        }
        if loaded < blocks {
            tracing::debug!(
                "{:?}: {} of {blocks} blocks read back from disk, the rest are computed",
                seq.id,
                loaded
            );
        }
        self.running.push(seq);
    }
}
