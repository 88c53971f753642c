//! Prefix-cache hits are verified by content along the whole chain: even a forged key
//! collision (the attack behind vLLM's CVE-2025-25183) cannot hand one prompt the KV blocks
//! computed after another prompt's prefix.

use tokenmill_engine::kv::block_manager::{BlockHash, BlockManager};

const A0: [u32; 4] = [1, 2, 3, 4];
const B0: [u32; 4] = [5, 6, 7, 8];
const X: [u32; 4] = [9, 9, 9, 9];

#[test]
fn a_key_collision_with_the_same_tokens_after_another_parent_is_not_a_hit() {
    let mut blocks = BlockManager::new(8, 4, true);
    let ids = blocks.allocate(3).unwrap();
    let a0 = blocks.register_full(0, ids[0], None, &A0);
    let b0 = blocks.register_full(0, ids[1], None, &B0);
    // Prompt A = A0 X. Its second block is registered under the key prompt B = B0 X will
    // compute for its own second block: the collision an attacker would search for.
    let forged = BlockHash::chain(Some(b0), &X);
    blocks.register_keyed(0, ids[2], forged, Some(a0), &X);

    let prompt_b = [B0, X].concat();
    let hits: Vec<_> = blocks
        .lookup_prefix(
            &prompt_b,
            &BlockHash::of_full_blocks(&prompt_b, 4),
            usize::MAX,
        )
        .ids()
        .collect();
    assert_eq!(
        hits,
        vec![ids[1]],
        "B0 is shared; A's X block (after A0) is not"
    );
}

#[test]
fn a_genuine_shared_prefix_is_still_a_hit_block_for_block() {
    let mut blocks = BlockManager::new(8, 4, true);
    let ids = blocks.allocate(2).unwrap();
    let a0 = blocks.register_full(0, ids[0], None, &A0);
    blocks.register_full(0, ids[1], Some(a0), &X);
    let prompt = [A0, X, B0].concat();
    let hits: Vec<_> = blocks
        .lookup_prefix(&prompt, &BlockHash::of_full_blocks(&prompt, 4), usize::MAX)
        .ids()
        .collect();
    assert_eq!(hits, ids);
}

#[test]
fn the_same_tokens_after_different_parents_get_different_keys() {
    let a0 = BlockHash::chain(None, &A0);
    let b0 = BlockHash::chain(None, &B0);
    assert_ne!(
        BlockHash::chain(Some(a0), &X),
        BlockHash::chain(Some(b0), &X)
    );
    assert_ne!(BlockHash::chain(None, &X), BlockHash::chain(Some(a0), &X));
}

#[test]
fn a_key_reads_back_from_the_hex_that_names_its_file_and_nothing_else_does() {
    let key = BlockHash::chain(None, &A0);
    assert_eq!(BlockHash::from_hex(&key.to_hex()), Some(key));
    assert_eq!(BlockHash::from_hex(&key.to_hex()[1..]), None);
    assert_eq!(BlockHash::from_hex(&"g".repeat(64)), None);
    assert_eq!(BlockHash::from_hex(&"é".repeat(32)), None);
}
