//! KV-cache events describe the prefix cache exactly: a subscriber that applies every batch
//! in order holds the very set of blocks the cache can hand out by content, after every step,
//! through prefix reuse and eviction in a pool too small to keep every prompt.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokenmill_engine::config::WeightMode;
use tokenmill_engine::kv::block_manager::{BlockHash, BlockManager};
use tokenmill_engine::models::checkpoint;
use tokenmill_engine::{Engine, EngineConfig, KvEvent, Request, SamplingParams};

/// What a subscriber rebuilds: each cached block's parent and tokens, by external hash.
#[derive(Default)]
struct Mirror {
    blocks: HashMap<u64, (Option<u64>, Vec<u32>)>,
    stored: usize,
    removed: usize,
}

impl Mirror {
    /// Applies one batch, holding each event to what it claims: a stored block is new, its
    /// tokens fill whole blocks, a removed block was there.
    fn apply(&mut self, batch: &[KvEvent]) {
        assert!(!batch.is_empty(), "an empty batch was handed over");
        for event in batch {
            match event {
                KvEvent::BlockStored {
                    block_hashes,
                    parent_block_hash,
                    token_ids,
                    block_size,
                } => {
                    assert_eq!(token_ids.len(), block_hashes.len() * block_size);
                    let mut parent = *parent_block_hash;
                    for (hash, tokens) in block_hashes.iter().zip(token_ids.chunks(*block_size)) {
                        let old = self.blocks.insert(*hash, (parent, tokens.to_vec()));
                        assert!(old.is_none(), "block {hash:x} stored twice");
                        parent = Some(*hash);
                        self.stored += 1;
                    }
                }
                KvEvent::BlockRemoved { block_hashes } => {
                    for hash in block_hashes {
                        assert!(
                            self.blocks.remove(hash).is_some(),
                            "block {hash:x} removed but never stored"
                        );
                        self.removed += 1;
                    }
                }
                KvEvent::AllBlocksCleared => self.blocks.clear(),
                // The disk tier's blocks; these tests run without one.
                KvEvent::BlockStoredOnDisk { .. } | KvEvent::BlockRemovedFromDisk { .. } => {}
            }
        }
    }

    fn sorted(&self) -> Vec<u64> {
        let mut hashes: Vec<u64> = self.blocks.keys().copied().collect();
        hashes.sort_unstable();
        hashes
    }
}

fn sorted(mut hashes: Vec<u64>) -> Vec<u64> {
    hashes.sort_unstable();
    hashes
}

#[test]
fn the_event_stream_rebuilds_the_cached_block_set_through_reuse_and_eviction() {
    crate::common::skip_without_model!();
    // 40 blocks of 8 tokens; the workload's distinct blocks (about 70) do not fit, so cached
    // blocks are evicted while shared prefixes are reused.
    let engine = common::load_engine(EngineConfig {
        block_size: 8,
        num_kv_blocks: Some(40),
        max_num_seqs: 4,
        ..EngineConfig::default()
    });
    replay_workload(engine, |t| t);
}

/// tiny-gemma3 (1 full and 6 sliding KV cache groups): the events describe the full group's
/// cached blocks alone, exactly, while sliding pages are released, cached and evicted beside
/// them in the same pool.
#[test]
fn the_event_stream_of_a_sliding_window_model_rebuilds_its_full_groups_cached_blocks() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/golden/zoo/tiny-gemma3/model-f32.gguf");
    let mut ckpt = checkpoint::open(&path).expect("the zoo's tiny-gemma3 opens");
    // 280 pages: 40 blocks at short context, far fewer than the workload's pages in 7 groups.
    let config = EngineConfig {
        block_size: 8,
        num_kv_blocks: Some(280),
        max_num_seqs: 4,
        max_num_batched_tokens: 16,
        weight_mode: WeightMode::F32,
        ..EngineConfig::default()
    };
    let engine = Engine::load(&mut *ckpt, config).expect("tiny-gemma3 loads");
    assert_eq!(engine.model_config().kv_cache_groups().num_groups(), 7);
    // Its vocabulary has 512 tokens.
    replay_workload(engine, |t| 1 + t % 511);
}

/// Runs prompts with shared prefixes and long one-off ones, two queued at a time, and after
/// every step holds a mirror built from the events to the cache's block set. `token` maps
/// the workload's ids into the model's vocabulary.
fn replay_workload(mut engine: Engine, token: impl Fn(u32) -> u32) {
    let batches: Arc<Mutex<Vec<Vec<KvEvent>>>> = Arc::default();
    let sink = batches.clone();
    engine.set_kv_event_sink(Box::new(move |events| sink.lock().unwrap().push(events)));
    let mut mirror = Mirror::default();
    let drain = |mirror: &mut Mirror| {
        for batch in batches.lock().unwrap().drain(..) {
            mirror.apply(&batch);
        }
    };
    drain(&mut mirror);
    assert_eq!(mirror.blocks.len(), 0, "a fresh engine caches nothing");

    // Two shared prefixes of 48 tokens, each followed by distinct questions, and long one-off
    // prompts that push the pool into evicting.
    let prefix = |p: u32| (0..48).map(move |i| 1000 + p * 100 + i);
    let mut prompts: Vec<Vec<u32>> = Vec::new();
    for round in 0..3u32 {
        for p in 0..2u32 {
            let question = (0..13).map(|i| 5000 + round * 50 + p * 13 + i);
            prompts.push(prefix(p).chain(question).map(&token).collect());
        }
        prompts.push((0..120).map(|i| token(9000 + round * 120 + i)).collect());
    }
    let mut receivers = Vec::new();
    for (i, prompt) in prompts.into_iter().enumerate() {
        let request = Request {
            prompt,
            params: SamplingParams {
                ignore_eos: true,
                ..SamplingParams::greedy(6)
            },
            priority: 0,
            constraint: None,
        };
        receivers.push(engine.add_request(request).unwrap().1);
        // Two requests queued at a time: some run together, later ones find what earlier
        // ones cached. After every step the mirror is the cache's block set.
        if i % 2 == 1 || i == 8 {
            while engine.has_unfinished() {
                engine.step().unwrap();
                drain(&mut mirror);
                assert_eq!(mirror.sorted(), sorted(engine.cached_block_hashes()));
            }
        }
    }
    assert!(
        engine.stats().prefix_cache_hits > 0,
        "no request reused a cached prefix"
    );
    assert!(mirror.removed > 0, "the pool never evicted a cached block");
    assert!(!mirror.blocks.is_empty());
    // The hashes are the cache's own keys: each chain that reaches a prompt's first block
    // recomputes, token for token, to the hashes the events carried.
    fn key(mirror: &Mirror, hash: u64) -> Option<BlockHash> {
        let (parent, tokens) = mirror.blocks.get(&hash)?;
        let parent_key = match parent {
            None => None,
            Some(p) => Some(key(mirror, *p)?),
        };
        Some(BlockHash::chain(parent_key, tokens))
    }
    let mut checked = 0;
    for &hash in mirror.blocks.keys() {
        if let Some(k) = key(&mirror, hash) {
            assert_eq!(k.external(), hash);
            checked += 1;
        }
    }
    assert!(checked > 0);
    drop(receivers);
}

#[test]
fn with_no_sink_nothing_is_recorded() {
    let mut blocks = BlockManager::new(4, 4, true);
    let ids = blocks.allocate(2).unwrap();
    blocks.register_full(0, ids[0], None, &[1, 2, 3, 4]);
    assert!(blocks.take_events().is_empty());
}

#[test]
fn events_start_with_a_clear_and_what_is_cached_already_parents_first() {
    let mut blocks = BlockManager::new(4, 4, true);
    let ids = blocks.allocate(3).unwrap();
    let a = blocks.register_full(0, ids[0], None, &[1, 2, 3, 4]);
    let b = blocks.register_full(0, ids[1], Some(a), &[5, 6, 7, 8]);
    blocks.enable_events();
    let events = blocks.take_events();
    assert_eq!(
        events,
        vec![
            KvEvent::AllBlocksCleared,
            KvEvent::BlockStored {
                block_hashes: vec![a.external()],
                parent_block_hash: None,
                token_ids: vec![1, 2, 3, 4],
                block_size: 4,
            },
            KvEvent::BlockStored {
                block_hashes: vec![b.external()],
                parent_block_hash: Some(a.external()),
                token_ids: vec![5, 6, 7, 8],
                block_size: 4,
            },
        ]
    );
    // Blocks of one prefix registered in a row make one event; evictions one removal.
    let c = blocks.register_full(0, ids[2], Some(b), &[9, 10, 11, 12]);
    for &id in ids.iter().rev() {
        blocks.release(id);
    }
    blocks.allocate(4).unwrap();
    let events = blocks.take_events();
    assert_eq!(
        events,
        vec![
            KvEvent::BlockStored {
                block_hashes: vec![c.external()],
                parent_block_hash: Some(b.external()),
                token_ids: vec![9, 10, 11, 12],
                block_size: 4,
            },
            KvEvent::BlockRemoved {
                block_hashes: vec![c.external(), b.external(), a.external()],
            },
        ]
    );
    assert_eq!(blocks.num_cached(), 0);
}
