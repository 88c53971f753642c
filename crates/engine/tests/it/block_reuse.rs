//! Which free block the pool hands out next: empty blocks before cached ones, the most
//! recently freed empty block first (its pages are already mapped), the least recently freed
//! cached block first.

use tokenmill_engine::config::{KvCacheGroups, SlidingWindow};
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
    blocks.register_full(0, ids[0], None, &tokens);
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
    let hit = |blocks: &BlockManager| -> Vec<_> {
        blocks
            .lookup_prefix(&tokens, &hashes, usize::MAX)
            .ids()
            .collect()
    };
    assert_eq!(hit(&blocks), vec![ids[0]]);
    assert_eq!(blocks.allocate(1).unwrap(), vec![ids[0]]);
    assert!(hit(&blocks).is_empty());
    blocks.check_invariants().unwrap();
}

/// A pool shared by a full group and a sliding one (window 8, 4-token blocks): a prompt's
/// hit needs the full group's blocks from the start and the sliding group's blocks of the
/// window before the first computed position. Evicting those sliding pages shortens the hit
/// to the longest prefix whose window is still cached.
#[test]
fn a_hit_is_cut_back_to_where_the_sliding_groups_window_is_still_cached() {
    let window = SlidingWindow::new(8).unwrap();
    let groups = KvCacheGroups::new(&[None, Some(window)]);
    let mut blocks = BlockManager::with_groups(32, 4, true, groups);
    let tokens: Vec<u32> = (1..=24).collect();
    let hashes = BlockHash::of_full_blocks(&tokens, 4);
    let mut tables = Vec::new();
    assert!(blocks.allocate_to(&mut tables, 0, 24));
    assert_eq!(indices(tables[1].held()).len(), 6);
    let mut parent = None;
    for (b, &hash) in hashes.iter().enumerate() {
        for (group, table) in tables.iter().enumerate() {
            let id = table.get(b).unwrap();
            blocks.register_keyed(group, id, hash, parent, &tokens[b * 4..(b + 1) * 4]);
        }
        parent = Some(hash);
    }
    blocks.release_all(&mut tables);
    blocks.check_invariants().unwrap();
    // At most 5 blocks (one token is left to compute). Position 20 sees 13..=20: sliding
    // blocks 3 and 4.
    let hit = blocks.lookup_prefix(&tokens, &hashes, 5);
    assert_eq!(hit.blocks, 5);
    assert_eq!(
        (hit.tables[0].held().len(), hit.tables[1].dropped()),
        (5, 3)
    );
    assert_eq!(hit.tables[1].held().len(), 2);
    // The empty pages go first, then the least recently freed cached ones: the sliding
    // group's, tail first (blocks 5, then 4).
    blocks.allocate(20 + 2).unwrap();
    let hit = blocks.lookup_prefix(&tokens, &hashes, 5);
    assert_eq!(
        hit.blocks, 4,
        "block 4's sliding page is gone; 16 sees 9..=16: 2 and 3"
    );
    assert_eq!(hit.tables[1].dropped(), 2);
    // Blocks 3 and 2 go too: only a 2-block hit (8 sees 1..=8: blocks 0 and 1) is whole.
    blocks.allocate(2).unwrap();
    let hit = blocks.lookup_prefix(&tokens, &hashes, 5);
    assert_eq!(hit.blocks, 2);
    assert_eq!(
        (hit.tables[1].dropped(), hit.tables[1].held().len()),
        (0, 2)
    );
    blocks.check_invariants().unwrap();
}

/// A sliding group's pages before the window of the next computed position are released
/// (and counted as such), while the full group keeps every block.
#[test]
fn a_sliding_group_releases_the_blocks_its_window_has_passed() {
    let window = SlidingWindow::new(8).unwrap();
    let groups = KvCacheGroups::new(&[None, Some(window)]);
    let mut blocks = BlockManager::with_groups(16, 4, false, groups);
    let mut tables = Vec::new();
    assert!(blocks.allocate_to(&mut tables, 0, 16));
    assert_eq!(blocks.num_free(), 16 - 8);
    // The row at 16 sees 9..=16: blocks 0 and 1 of the sliding group are done with.
    assert_eq!(blocks.pages_needed(&tables, 16, 20), 2);
    assert!(blocks.allocate_to(&mut tables, 16, 20));
    assert_eq!((tables[0].held().len(), tables[1].held().len()), (5, 3));
    assert_eq!(tables[1].dropped(), 2);
    assert_eq!(blocks.num_free(), 16 - 8);
    assert_eq!(blocks.release_outside_window(&mut tables, 24), 2);
    blocks.check_tables([tables.as_slice()]).unwrap();
    blocks.release_all(&mut tables);
    assert_eq!(blocks.num_free(), 16);
}
