//! `--kv-cache-dtype`: the pool sized from `--kv-cache-memory-gib` counts the element size,
//! so the default f16 cache holds twice the tokens of f32 in the same memory.

mod common;

use tokenmill_engine::kv_cache::KvCacheDtype;
use tokenmill_engine::EngineConfig;

#[test]
fn the_f16_cache_holds_twice_the_tokens_of_an_f32_cache_in_the_same_memory() {
    let memory = 64 << 20;
    let blocks = |kv| {
        let engine = common::load_engine(EngineConfig {
            kv_cache_memory_bytes: memory,
            kv_cache_dtype: kv,
            max_model_len: Some(1024),
            ..EngineConfig::default()
        });
        let c = engine.model_config();
        let per_block = c.kv_bytes_per_token(kv.element_size()) * engine.limits().block_size;
        assert_eq!(engine.limits().num_kv_blocks, memory / per_block);
        engine.limits().num_kv_blocks
    };
    let (f32_blocks, f16_blocks, auto_blocks, bf16_blocks) = (
        blocks(KvCacheDtype::F32),
        blocks(KvCacheDtype::F16),
        blocks(KvCacheDtype::Auto),
        blocks(KvCacheDtype::Bf16),
    );
    assert!(f16_blocks >= 2 * f32_blocks && f16_blocks <= 2 * f32_blocks + 1);
    assert_eq!(auto_blocks, f16_blocks, "auto is f16");
    assert_eq!(bf16_blocks, f16_blocks);
}

#[test]
fn the_dtype_flag_parses_vllms_spellings() {
    for (s, want) in [
        ("auto", KvCacheDtype::Auto),
        ("f32", KvCacheDtype::F32),
        ("float16", KvCacheDtype::F16),
        ("bf16", KvCacheDtype::Bf16),
    ] {
        assert_eq!(s.parse::<KvCacheDtype>().unwrap(), want);
    }
    assert!("fp8".parse::<KvCacheDtype>().is_err());
    assert_eq!(KvCacheDtype::Auto.resolve(), KvCacheDtype::F16);
}
