//! Engine configuration is validated in one step, before anything is allocated: each bad
//! setting is refused with its name, and the defaults pass.

use tokenmill_engine::checkpoint::{DummyCheckpoint, DummyDType};
use tokenmill_engine::model_config::ModelConfig;
use tokenmill_engine::{Engine, EngineConfig, EngineError};

fn model() -> ModelConfig {
    ModelConfig::smollm2_135m()
}

#[test]
fn the_default_configuration_is_valid_and_sized_by_memory() {
    let plan = EngineConfig::default().plan(&model()).unwrap();
    let block_bytes = model().kv_bytes_per_token() * 16;
    assert_eq!(plan.num_blocks, (2 << 30) / block_bytes);
    assert_eq!(plan.max_model_len, model().max_position_embeddings);
}

#[test]
fn each_bad_setting_is_refused_by_name() {
    let base = EngineConfig::default;
    let cases: Vec<(EngineConfig, &str)> = vec![
        (EngineConfig { block_size: 0, ..base() }, "block_size"),
        (EngineConfig { block_size: 4, ..base() }, "block_size"),
        (EngineConfig { block_size: 24, ..base() }, "block_size"),
        (EngineConfig { block_size: 1 << 62, ..base() }, "block_size"),
        (EngineConfig { max_num_seqs: 0, ..base() }, "max_num_seqs"),
        (EngineConfig { max_num_batched_tokens: 0, ..base() }, "max_num_batched_tokens"),
        (EngineConfig { max_num_batched_tokens: 64, max_num_seqs: 128, ..base() }, "max_num_batched_tokens"),
        (EngineConfig { long_prefill_token_threshold: Some(0), ..base() }, "long_prefill_token_threshold"),
        (EngineConfig { num_kv_blocks: Some(0), ..base() }, "num_kv_blocks"),
        (EngineConfig { num_kv_blocks: Some(usize::MAX), ..base() }, "num_kv_blocks"),
        (EngineConfig { kv_cache_memory_bytes: 0, ..base() }, "kv_cache_memory_bytes"),
        (EngineConfig { kv_cache_memory_bytes: 1000, ..base() }, "kv_cache_memory_bytes"),
        (EngineConfig { kv_cache_memory_bytes: usize::MAX, ..base() }, "kv_cache_memory_bytes"),
        (EngineConfig { max_model_len: Some(0), ..base() }, "max_model_len"),
        (EngineConfig { max_model_len: Some(1), ..base() }, "max_model_len"),
        (EngineConfig { max_model_len: Some(1 << 40), ..base() }, "max_model_len"),
    ];
    for (config, setting) in cases {
        let error = config.validate(&model()).unwrap_err();
        assert_eq!(error.setting, setting, "{config:?}: {error}");
        assert!(!error.reason.is_empty());
    }
}

#[test]
fn engine_construction_refuses_a_bad_configuration_before_loading_weights() {
    let mut ckpt = DummyCheckpoint::new("smollm2-135m", DummyDType::F32, 0).unwrap();
    let config = EngineConfig {
        long_prefill_token_threshold: Some(0),
        ..EngineConfig::default()
    };
    match Engine::load(&mut ckpt, config) {
        Err(EngineError::InvalidConfig(bad)) => {
            assert_eq!(bad.flag(), "--long-prefill-token-threshold");
            assert_eq!(
                bad.to_string(),
                "long_prefill_token_threshold = 0: must be at least 1 (omit it for no cap): \
                 a cap of 0 schedules empty chunks"
            );
        }
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("a threshold of 0 was accepted"),
    }
}
