//! Which free block the pool hands out next: empty blocks before cached ones, the most
//! recently freed empty block first (its pages are already mapped), the least recently freed
//! cached block first.

use tokenmill_engine::kv::block_manager::{BlockHash, BlockManager};

fn indices(ids: &[tokenmill_engine::kv::block_manager::BlockId]) -> Vec<usize> {
    ids.iter().map(|id| id.index()).collect()
}

#[test]
fn a_fresh_pool_hands_out_its_blocks_in_order() {
    let mut blocks = BlockManager::new(8, 4, false);
    assert_eq!(indices(&blocks.allocate(3).unwrap()), vec![0, 1, 2]);
    assert_eq!(indices(&blocks.allocate(2).unwrap()), vec![3, 4]);
}

#[test]
fn a_freed_empty_block_is_handed_out_again_before_a_never_used_one() {
    let mut blocks = BlockManager::new(8, 4, false);
    let ids = blocks.allocate(3).unwrap();
    blocks.release(ids[2]);
    blocks.release(ids[0]);
    // Most recently freed first, then the other freed one, then never-used blocks.
    assert_eq!(indices(&blocks.allocate(3).unwrap()), vec![0, 2, 3]);
    blocks.check_invariants().unwrap();
}

#[test]
fn a_cached_block_is_evicted_only_when_no_empty_block_is_left() {
    let tokens = [1u32, 2, 3, 4];
    let hashes = BlockHash::of_full_blocks(&tokens, 4);
    let mut blocks = BlockManager::new(4, 4, true);
    let ids = blocks.allocate(4).unwrap();
    blocks.register_full(ids[0], None, &tokens);
    // The cached block is freed first: least recently used, yet kept while empty ones last.
    for &id in &ids {
        blocks.release(id);
    }
    let taken = blocks.allocate(3).unwrap();
    assert!(
        !taken.contains(&ids[0]),
        "evicted {:?} with {taken:?} empty",
        ids[0]
    );
    assert_eq!(blocks.lookup_prefix(&tokens, &hashes), vec![ids[0]]);
    assert_eq!(blocks.allocate(1).unwrap(), vec![ids[0]]);
    assert!(blocks.lookup_prefix(&tokens, &hashes).is_empty());
    blocks.check_invariants().unwrap();
}
