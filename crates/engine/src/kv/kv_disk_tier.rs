//! `KvDiskTier`: a second prefix-cache tier in a directory, which outlives the process.
//!
//! Every full block that enters the prefix cache is also handed here (write-through); a
//! writer thread stores it as one [`DiskBlock`] file, so the engine's step never waits on
//! the disk: a block whose queue slot is not free is skipped, not waited for. A restarted
//! engine (after a clean stop or a kill -9) and other replicas on the same machine find
//! the blocks by their chained key, as blocks evicted from RAM are found.
//!
//! Reads are asynchronous too: [`start_read`](KvDiskTier::start_read) hands a run of
//! blocks to a reader thread, which reads and checks each file into a buffer of its own;
//! [`finished_reads`](KvDiskTier::finished_reads) hands the pages back, tagged with the
//! [`ReadId`] they were asked under. The reader never touches the KV cache: the forward
//! pass borrows each slab whole, so a second thread storing into any page of it while the
//! pass runs would be a data race in Rust's terms even where the pages are disjoint. The
//! engine thread copies the checked pages in between steps: one `memcpy` of each byte,
//! where the reader read it from the file, hashed it (SHA-256, several times slower per
//! byte than a copy) and copied it out of the file's buffer.
//!
//! Crash safety: a block is written to a temporary name, flushed to the disk (`fsync`) and
//! renamed to its final name, so a visible file is always whole; each file also carries a
//! checksum and the tier's fingerprint (model identity, KV layout and dtype, block size),
//! checked on every read, so a torn, corrupted or foreign file is never served.
//! Files live in a folder named after the fingerprint, so engines of different models
//! share a directory without seeing each other's blocks.
//!
//! Disk trouble never fails a request: a directory that cannot be written at startup, or
//! a write that fails later, is logged once and the tier goes on as far as it can
//! (RAM-only when nothing can be written); a block that cannot be read is computed. A full
//! filesystem (`ENOSPC`, or a quota's `EDQUOT`) is logged once as such; the failed write's
//! temporary file is removed, and until the filesystem has room for a block again (asked
//! of `statvfs` before each block, not by writing) blocks are skipped, so a full disk costs
//! one system call per block, never a write attempt per block.
//! With a size cap the writer deletes the least recently used files (by modification
//! time; a read touches its file) once the directory grows past it.

use crate::kv::block_manager::BlockHash;
use crate::kv::disk_block::{BadBlock, DiskBlock, Expected};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{
    channel, sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError,
};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// Bytes of pages the writer's queue may hold: past it, new blocks are skipped.
const QUEUE_BYTES: usize = 256 << 20;
/// A temporary file older than this is left over from a process that died mid-write.
const STALE_TEMP: Duration = Duration::from_secs(600);
/// Once over the cap, files are deleted until the directory is back under this share of it.
const EVICT_TO: f64 = 0.9;

/// Where and how large: what `--kv-offload-dir` and `--kv-offload-max-gib` ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvOffloadConfig {
    pub dir: PathBuf,
    /// The directory's size cap in bytes (every fingerprint's files together); `None`:
    /// no cap.
    pub max_bytes: Option<u64>,
    /// What identifies the weights (a digest of the checkpoint's files): blocks are
    /// shared only between engines that agree on it and on the KV layout.
    pub model_identity: [u8; 32],
}

/// What makes two engines' blocks interchangeable, beyond the model's identity.
#[derive(Debug, Clone)]
pub struct KvLayout {
    /// The KV dtype, shape and group layout, as text (only compared, never parsed).
    pub description: String,
    pub block_size: usize,
    pub page_bytes: usize,
}

/// The tier's counters, for `/metrics` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvDiskStats {
    pub blocks_written: u64,
    /// Blocks skipped because the writer's queue was full (the step never waits).
    pub blocks_skipped: u64,
    pub write_failures: u64,
    /// Files found but refused (torn, corrupted, foreign).
    pub bad_files: u64,
    pub files_evicted: u64,
    /// Blocks the reader thread read back and found whole.
    pub blocks_read: u64,
}

#[derive(Default)]
struct Counters {
    written: AtomicU64,
    skipped: AtomicU64,
    failed: AtomicU64,
    bad: AtomicU64,
    evicted: AtomicU64,
    read: AtomicU64,
}

/// Which read a finished one answers: the caller's tag, handed back unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadId(pub u64);

/// A block to read back: the key its file is named after, and the parent key and tokens
/// the file must hold (checked as [`DiskBlock::decode`] checks them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockToRead {
    pub hash: BlockHash,
    pub parent: Option<BlockHash>,
    pub tokens: Vec<u32>,
}

/// What [`KvDiskTier::start_read`] hands the reader thread.
struct ReadJob {
    id: ReadId,
    blocks: Vec<BlockToRead>,
}

/// A finished read: the pages of the asked blocks' leading run whose files were present
/// and whole, in order. It stops at the first block whose file vanished or failed its
/// checks, so `pages.len()` may be anything from zero to the blocks asked for; the rest
/// are for the caller to compute.
#[derive(Debug)]
pub struct ReadDone {
    pub id: ReadId,
    pub pages: Vec<Vec<u8>>,
}

/// Test support: while any [`ReadHold`] lives, the reader thread starts no read, so a
/// test can act between a read's start and its end without timing anything.
#[derive(Default)]
struct ReadGate {
    holds: Mutex<usize>,
    opened: Condvar,
}

impl ReadGate {
    fn wait_open(&self) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        while *holds > 0 {
            holds = self.opened.wait(holds).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Holds the reader thread back until dropped ([`KvDiskTier::hold_reads`]).
pub struct ReadHold(Arc<ReadGate>);

impl Drop for ReadHold {
    fn drop(&mut self) {
        let mut holds = self.0.holds.lock().unwrap_or_else(|e| e.into_inner());
        *holds -= 1;
        self.0.opened.notify_all();
    }
}

struct Shared {
    root: PathBuf,
    /// `root/<fingerprint in hex>`: this engine's files.
    dir: PathBuf,
    fingerprint: [u8; 32],
    page_bytes: usize,
    max_bytes: Option<u64>,
    counters: Counters,
    /// One log line for the first write failure, not one per block.
    warned: AtomicBool,
    /// One log line for the first time the filesystem is found full.
    warned_full: AtomicBool,
    /// Blocks written and files deleted since the last `take_changes`, in order, for KV
    /// events (only while wanted).
    changes: Mutex<Option<Vec<DiskChange>>>,
}

/// A change to the set of blocks in this engine's folder, as KV events announce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskChange {
    Written(DiskBlockKey),
    /// A block's file deleted: by the size cap, or refused on reading.
    Removed(BlockHash),
}

/// A stored block's identity, without its page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskBlockKey {
    pub hash: BlockHash,
    pub parent: Option<BlockHash>,
    pub tokens: Vec<u32>,
}

pub struct KvDiskTier {
    shared: Arc<Shared>,
    /// `None` when the directory could not be written at startup: reads only.
    queue: Option<SyncSender<DiskBlock>>,
    writer: Option<JoinHandle<()>>,
    /// The reader thread's jobs; `None` once stopped.
    reads: Option<Sender<ReadJob>>,
    /// Finished reads, from the reader thread (or from `start_read` itself when there is
    /// no reader thread: every such read is answered with no page).
    done: Receiver<ReadDone>,
    done_tx: Sender<ReadDone>,
    reader: Option<JoinHandle<()>>,
    gate: Arc<ReadGate>,
}

impl KvDiskTier {
    /// Opens (making it if missing) the tier's folder under `config.dir` and starts its
    /// writer. A directory that cannot be written is logged once and leaves a tier that
    /// only reads (blocks other processes wrote are still found).
    pub fn open(config: &KvOffloadConfig, layout: &KvLayout) -> Self {
        let fingerprint = fingerprint(&config.model_identity, layout);
        let hex: String = fingerprint[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = config.dir.join(hex);
        let shared = Arc::new(Shared {
            root: config.dir.clone(),
            dir,
            fingerprint,
            page_bytes: layout.page_bytes,
            max_bytes: config.max_bytes,
            counters: Counters::default(),
            warned: AtomicBool::new(false),
            warned_full: AtomicBool::new(false),
            changes: Mutex::new(None),
        });
        let writable = probe_writable(&shared.dir);
        let (queue, writer) = match writable {
            Ok(()) => {
                let bound = (QUEUE_BYTES / layout.page_bytes.max(1)).max(4);
                let (tx, rx) = sync_channel(bound);
                let for_thread = Arc::clone(&shared);
                let writer = std::thread::Builder::new()
                    .name("kv-offload".into())
                    .spawn(move || write_loop(&for_thread, rx));
                match writer {
                    Ok(handle) => (Some(tx), Some(handle)),
                    Err(e) => {
                        tracing::warn!("KV offload: no writer thread ({e}); KV stays in RAM only");
                        (None, None)
                    }
                }
            }
            Err(e) => {
                shared.warned.store(true, Ordering::Relaxed);
                tracing::warn!(
                    "KV offload: {} cannot be written ({e}); KV stays in RAM only",
                    shared.dir.display()
                );
                (None, None)
            }
        };
        if queue.is_some() {
            tracing::info!(
                "KV offload: blocks of {} bytes written through to {}{}",
                layout.page_bytes,
                shared.dir.display(),
                config
                    .max_bytes
                    .map(|b| format!(", capped at {:.2} GiB", b as f64 / (1u64 << 30) as f64))
                    .unwrap_or_default()
            );
        }
        let (done_tx, done) = channel();
        let gate = Arc::<ReadGate>::default();
        let (jobs_tx, jobs) = channel();
        let (for_thread, answers, gate_for_thread) =
            (Arc::clone(&shared), done_tx.clone(), Arc::clone(&gate));
        let reader = std::thread::Builder::new()
            .name("kv-offload-read".into())
            .spawn(move || read_loop(&for_thread, &gate_for_thread, jobs, answers));
        let (reads, reader) = match reader {
            Ok(handle) => (Some(jobs_tx), Some(handle)),
            Err(e) => {
                tracing::warn!("KV offload: no reader thread ({e}); blocks on disk are computed");
                (None, None)
            }
        };
        Self {
            shared,
            queue,
            writer,
            reads,
            done,
            done_tx,
            reader,
            gate,
        }
    }

    /// Whether blocks are being written (the directory was writable at startup).
    pub fn is_writing(&self) -> bool {
        self.queue.is_some()
    }

    /// The tier's counters so far.
    pub fn stats(&self) -> KvDiskStats {
        let c = &self.shared.counters;
        KvDiskStats {
            blocks_written: c.written.load(Ordering::Relaxed),
            blocks_skipped: c.skipped.load(Ordering::Relaxed),
            write_failures: c.failed.load(Ordering::Relaxed),
            bad_files: c.bad.load(Ordering::Relaxed),
            files_evicted: c.evicted.load(Ordering::Relaxed),
            blocks_read: c.read.load(Ordering::Relaxed),
        }
    }

    /// Hands a block to the writer without waiting; skipped (and counted) when its queue is
    /// full or nothing can be written.
    pub fn store(&self, block: DiskBlock) {
        let Some(queue) = &self.queue else {
            return;
        };
        match queue.try_send(block) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.counters.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether a file for `hash` is present (not yet checked: [`read`](Self::read) does).
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.shared.path_of(hash).is_file()
    }

    /// Hands `blocks` (a run along one prefix) to the reader thread; its pages come back
    /// from [`finished_reads`](Self::finished_reads) under `id`. Never waits on the disk.
    pub fn start_read(&self, id: ReadId, blocks: Vec<BlockToRead>) {
        let job = ReadJob { id, blocks };
        let refused = match &self.reads {
            Some(reads) => reads.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        if let Some(job) = refused {
            // No reader: the blocks are computed instead.
            let _ = self.done_tx.send(ReadDone {
                id: job.id,
                pages: Vec::new(),
            });
        }
    }

    /// The reads finished since the last call. With `wait`, and none finished yet, waits up
    /// to that long for one (an engine with nothing else to do, not a spinning loop).
    pub fn finished_reads(&self, wait: Option<Duration>) -> Vec<ReadDone> {
        let mut out = Vec::new();
        if let Some(wait) = wait {
            match self.done.recv_timeout(wait) {
                Ok(done) => out.push(done),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
        }
        out.extend(self.done.try_iter());
        out
    }

    /// Test support: the reader thread starts no read until the hold is dropped.
    #[doc(hidden)]
    pub fn hold_reads(&self) -> ReadHold {
        *self.gate.holds.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        ReadHold(Arc::clone(&self.gate))
    }

    /// Starts keeping the blocks written and the files deleted, for KV events;
    /// `take_changes` hands them on.
    pub fn record_changes(&self) {
        *self.shared.changes() = Some(Vec::new());
    }

    /// The changes since the last call, oldest first (empty unless `record_changes` was
    /// called).
    pub fn take_changes(&self) -> Vec<DiskChange> {
        self.shared
            .changes()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Waits until every block handed over so far is written (or failed), then stops the
    /// writer. Dropping the tier does the same.
    pub fn flush(&mut self) {
        self.queue = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Drop for KvDiskTier {
    fn drop(&mut self) {
        self.flush();
        // The reader ends once its queue closes (a held gate would keep it waiting: holds
        // belong to tests, which drop them first).
        self.reads = None;
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Shared {
    fn path_of(&self, hash: BlockHash) -> PathBuf {
        self.dir.join(format!("{}.kvb", hash.to_hex()))
    }

    /// The page of `block`, if its file is present and passes every check
    /// ([`DiskBlock::decode`]); a file that fails is logged, counted and deleted, so a
    /// later write can replace it.
    fn read(&self, block: &BlockToRead) -> Option<Vec<u8>> {
        let path = self.path_of(block.hash);
        let bytes = fs::read(&path).ok()?;
        let expect = Expected {
            hash: block.hash,
            parent: block.parent,
            tokens: &block.tokens,
            page_bytes: self.page_bytes,
        };
        match DiskBlock::decode(&bytes, &self.fingerprint, &expect) {
            Ok(page) => {
                // Least recently used goes first under the cap: a hit is a use.
                if let Ok(file) = fs::File::open(&path) {
                    let _ = file.set_modified(SystemTime::now());
                }
                self.counters.read.fetch_add(1, Ordering::Relaxed);
                Some(page)
            }
            Err(bad) => {
                self.refuse(&path, bad);
                None
            }
        }
    }

    fn refuse(&self, path: &Path, bad: BadBlock) {
        self.counters.bad.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("KV offload: ignoring {} ({bad})", path.display());
        if fs::remove_file(path).is_ok() {
            self.removed(path);
        }
    }

    fn changes(&self) -> std::sync::MutexGuard<'_, Option<Vec<DiskChange>>> {
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the deletion of the block file at `path` when it is one of this engine's
    /// (other fingerprints' blocks are other models': no event of this one names them).
    fn removed(&self, path: &Path) {
        if path.parent() != Some(self.dir.as_path()) {
            return;
        }
        let hash = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(BlockHash::from_hex);
        if let (Some(hash), Some(changes)) = (hash, self.changes().as_mut()) {
            changes.push(DiskChange::Removed(hash));
        }
    }

    /// Writes one block whole or not at all: a temporary name, `fsync`, then the rename
    /// that makes it visible.
    fn write(&self, block: &DiskBlock, serial: u64) -> std::io::Result<u64> {
        let path = self.path_of(block.hash);
        if path.is_file() {
            return Ok(0);
        }
        let temp = self.dir.join(format!(
            ".{}.{}.{serial}.tmp",
            block.hash.to_hex(),
            std::process::id()
        ));
        let bytes = block.encode(&self.fingerprint);
        let written = (|| {
            let mut file = fs::File::create(&temp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::rename(&temp, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written.map(|()| bytes.len() as u64)
    }
}

/// The writer thread: stores each block it is handed until the tier is dropped.
fn write_loop(shared: &Shared, blocks: Receiver<DiskBlock>) {
    remove_stale_temps(&shared.dir);
    let mut used = shared.max_bytes.map(|_| directory_bytes(&shared.root));
    let mut serial = 0u64;
    // Set when a write found the filesystem full: blocks are skipped until it has room.
    let mut full = false;
    for block in blocks {
        serial += 1;
        if full {
            let needed = (block.page.len() + 4 * block.tokens.len() + 4096) as u64;
            if free_bytes(&shared.dir).is_some_and(|free| free < needed) {
                shared.counters.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        match shared.write(&block, serial) {
            Ok(bytes) => {
                if full {
                    full = false;
                    tracing::info!(
                        "KV offload: {} has room again; blocks are written through",
                        shared.dir.display()
                    );
                }
                if bytes > 0 {
                    shared.counters.written.fetch_add(1, Ordering::Relaxed);
                    if let Some(changes) = shared.changes().as_mut() {
                        changes.push(DiskChange::Written(DiskBlockKey {
                            hash: block.hash,
                            parent: block.parent,
                            tokens: block.tokens,
                        }));
                    }
                }
                if let (Some(used), Some(cap)) = (used.as_mut(), shared.max_bytes) {
                    *used += bytes;
                    if *used > cap {
                        *used = evict(shared, cap);
                    }
                }
            }
            Err(e) if is_full(&e) => {
                shared.counters.failed.fetch_add(1, Ordering::Relaxed);
                full = true;
                if !shared.warned_full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "KV offload: the disk holding {} is full ({e}); new blocks stay in RAM \
                         only until it has room again (logged once)",
                        shared.dir.display()
                    );
                }
            }
            Err(e) => {
                shared.counters.failed.fetch_add(1, Ordering::Relaxed);
                if !shared.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "KV offload: writing to {} failed ({e}); blocks that cannot be written \
                         stay in RAM only (logged once)",
                        shared.dir.display()
                    );
                }
            }
        }
    }
}

/// Whether `e` says the filesystem (or the user's quota on it) has no room.
fn is_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Bytes an unprivileged writer may still put on the filesystem holding `dir`; `None`
/// when it cannot be asked.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and `stat` points
    // at room for one `statvfs`, which the call fills when it returns 0 (read only then).
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The reader thread: reads each job's blocks in order, up to the first that fails, until
/// the tier is dropped.
fn read_loop(shared: &Shared, gate: &ReadGate, jobs: Receiver<ReadJob>, done: Sender<ReadDone>) {
    for job in jobs {
        gate.wait_open();
        let pages = job.blocks.iter().map_while(|b| shared.read(b)).collect();
        if done.send(ReadDone { id: job.id, pages }).is_err() {
            return;
        }
    }
}

/// Deletes the least recently used block files under the root (every fingerprint's: the
/// cap is the directory's) until it holds at most `EVICT_TO` of `cap`; returns its size.
fn evict(shared: &Shared, cap: u64) -> u64 {
    let mut files = block_files(&shared.root);
    let mut used: u64 = files.iter().map(|f| f.2).sum();
    files.sort_by_key(|f| f.0);
    let goal = (cap as f64 * EVICT_TO) as u64;
    for (_, path, size) in files {
        if used <= goal {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            used -= size;
            shared.counters.evicted.fetch_add(1, Ordering::Relaxed);
            shared.removed(&path);
        }
    }
    used
}

/// Every block file under `root` (one level of fingerprint folders): modification time,
/// path, size.
fn block_files(root: &Path) -> Vec<(SystemTime, PathBuf, u64)> {
    let mut out = Vec::new();
    let Ok(folders) = fs::read_dir(root) else {
        return out;
    };
    for folder in folders.flatten() {
        let Ok(entries) = fs::read_dir(folder.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "kvb") {
                if let Ok(meta) = entry.metadata() {
                    let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    out.push((modified, path, meta.len()));
                }
            }
        }
    }
    out
}

fn directory_bytes(root: &Path) -> u64 {
    block_files(root).iter().map(|f| f.2).sum()
}

/// Temporary files a killed process left (old enough that no live writer still owns them).
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_TEMP);
        if stale && path.extension().is_some_and(|e| e == "tmp") {
            let _ = fs::remove_file(path);
        }
    }
}

/// Makes `dir` and writes and removes a file in it.
fn probe_writable(dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".probe.{}.tmp", std::process::id()));
    fs::write(&probe, b"tokenmill")?;
    fs::remove_file(&probe)
}

/// SHA-256 over the format's name, the model's identity, the KV layout and the platform's
/// byte order (pages are stored in native order).
fn fingerprint(model_identity: &[u8; 32], layout: &KvLayout) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"tokenmill KV disk tier 1\0");
    h.update(model_identity);
    h.update((layout.description.len() as u64).to_le_bytes());
    h.update(layout.description.as_bytes());
    h.update((layout.block_size as u64).to_le_bytes());
    h.update((layout.page_bytes as u64).to_le_bytes());
    h.update([u8::from(cfg!(target_endian = "little"))]);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> KvLayout {
        KvLayout {
            description: "test".into(),
            block_size: 2,
            page_bytes: 16,
        }
    }

    fn config(dir: &Path, max_bytes: Option<u64>) -> KvOffloadConfig {
        KvOffloadConfig {
            dir: dir.to_path_buf(),
            max_bytes,
            model_identity: [1; 32],
        }
    }

    fn block(i: u32) -> DiskBlock {
        let tokens = vec![i, i + 1];
        DiskBlock {
            hash: BlockHash::chain(None, &tokens),
            parent: None,
            tokens,
            page: vec![i as u8; 16],
        }
    }

    /// Reads `b` back through the reader thread and waits for it.
    fn read_back(tier: &KvDiskTier, b: &DiskBlock) -> Option<Vec<u8>> {
        let ask = BlockToRead {
            hash: b.hash,
            parent: b.parent,
            tokens: b.tokens.clone(),
        };
        tier.start_read(ReadId(7), vec![ask]);
        let mut done = tier.finished_reads(Some(Duration::from_secs(60)));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].id, ReadId(7));
        done.pop().and_then(|d| d.pages.into_iter().next())
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tokenmill-kv-disk-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_block_written_by_one_tier_is_read_by_the_next() {
        let dir = temp_dir("reopen");
        let mut tier = KvDiskTier::open(&config(&dir, None), &layout());
        tier.store(block(5));
        tier.flush();
        let tier = KvDiskTier::open(&config(&dir, None), &layout());
        let b = block(5);
        assert_eq!(read_back(&tier, &b), Some(b.page));
        assert_eq!(read_back(&tier, &block(6)), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_model_identity_finds_nothing() {
        let dir = temp_dir("foreign");
        let mut tier = KvDiskTier::open(&config(&dir, None), &layout());
        tier.store(block(5));
        tier.flush();
        let other = KvOffloadConfig {
            model_identity: [2; 32],
            ..config(&dir, None)
        };
        let tier = KvDiskTier::open(&other, &layout());
        let b = block(5);
        assert!(!tier.contains(b.hash));
        assert_eq!(read_back(&tier, &b), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_read_stops_at_the_first_missing_block_and_waits_while_held() {
        let dir = temp_dir("run");
        let mut tier = KvDiskTier::open(&config(&dir, None), &layout());
        for i in [1, 2, 4] {
            tier.store(block(i));
        }
        tier.flush();
        let ask = |i: u32| {
            let b = block(i);
            BlockToRead {
                hash: b.hash,
                parent: None,
                tokens: b.tokens,
            }
        };
        let hold = tier.hold_reads();
        tier.start_read(ReadId(1), vec![ask(1), ask(2), ask(3), ask(4)]);
        assert!(tier.finished_reads(None).is_empty(), "read while held");
        drop(hold);
        let done = tier.finished_reads(Some(Duration::from_secs(60)));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].pages, vec![block(1).page, block(2).page]);
        assert_eq!(tier.stats().blocks_read, 2);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_cap_deletes_the_oldest_files() {
        let dir = temp_dir("cap");
        let one = block(0).encode(&[0; 32]).len() as u64;
        let mut tier = KvDiskTier::open(&config(&dir, Some(3 * one)), &layout());
        for i in 0..8 {
            tier.store(block(i));
        }
        tier.flush();
        assert!(directory_bytes(&dir) <= 3 * one);
        assert!(tier.stats().files_evicted >= 5);
        let newest = block(7);
        assert!(tier.contains(newest.hash));
        let _ = fs::remove_dir_all(&dir);
    }
}
