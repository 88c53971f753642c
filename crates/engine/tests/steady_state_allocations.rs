//! Once warmed up, a forward pass of the real model allocates nothing: every activation
//! lives in the model's scratch, the logits in the caller's buffer, the quantized
//! activations in a per-thread buffer. Counted by a global allocator over all threads, so
//! this file holds this one test only.

// Its own binary, not a module of `tests/it`: the counting global allocator counts every
// thread of the process, so any test running beside it would be counted too.
#[path = "it/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::config::WeightMode;
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kv::block_manager::BlockManager;
use tokenmill_engine::kv::kv_cache::KvCache;
use tokenmill_engine::models::checkpoint::GgufCheckpoint;
use tokenmill_engine::models::DecoderModel;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Passes before counting, and passes counted (each must allocate nothing).
const WARM_UP_PASSES: usize = 10;
const MEASURED_PASSES: usize = 3;

#[test]
fn a_steady_state_forward_pass_allocates_nothing() {
    crate::common::skip_without_model!();
    let mut ckpt = GgufCheckpoint::open(&common::model_path()).expect("default model opens");
    let model = DecoderModel::load(&mut ckpt, WeightMode::Quantized, 512).expect("model loads");
    let c = model.config().clone();
    let (block_size, blocks) = (16, 16);
    let mut kv = KvCache::new(
        c.num_layers,
        blocks,
        block_size,
        c.kv_heads(),
        KvCacheDtype::F16,
    );
    let mut manager = BlockManager::new(blocks, block_size, false);
    let (a, b) = (manager.allocate(8).unwrap(), manager.allocate(8).unwrap());
    // A mixed step: one prefill chunk of 40 tokens, and one decode at position 70.
    let mut batch = ForwardBatch::default();
    let prompt: Vec<u32> = (0..40).map(|i| 100 + i * 7).collect();
    batch.push_seq(&prompt, 0, &a, block_size, true);
    batch.push_seq(&[42], 70, &b, block_size, true);
    model.reserve(64, 4);
    let mut logits = Vec::with_capacity(4 * c.vocab_size);
    // Warm up: per-thread buffers and the compute pool's first use allocate once. Every
    // pass runs on this thread, as the engine runs every step on its one thread: run inside
    // `rayon::scope`, a pass went to whichever rayon worker was free, and a worker's first
    // pass allocated its thread's attention plan and scratch (13 allocations, seen on a
    // loaded machine). A pool helper's buffers grow the first time it claims a task of each
    // size, hence several warm-up passes.
    for _ in 0..WARM_UP_PASSES {
        model.forward_into(&batch, &mut kv, &mut logits).unwrap();
    }
    for pass in 0..MEASURED_PASSES {
        let before = ALLOCATIONS.load(Ordering::SeqCst);
        model.forward_into(&batch, &mut kv, &mut logits).unwrap();
        let during = ALLOCATIONS.load(Ordering::SeqCst) - before;
        assert_eq!(logits.len(), 2 * c.vocab_size);
        assert_eq!(
            during, 0,
            "warmed-up forward pass {pass} made {during} allocations"
        );
    }
}
