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
    let element = EngineConfig::default().kv_cache_dtype.element_size();
    let block_bytes = model().kv_bytes_per_token(element) * 16;
    assert_eq!(plan.num_blocks, (2 << 30) / block_bytes);
    assert_eq!(plan.max_model_len, model().max_position_embeddings);
}

#[test]
fn each_bad_setting_is_refused_by_name() {
    type Change = fn(&mut EngineConfig);
    let cases: [(Change, &str); 16] = [
        (|c| c.block_size = 0, "block_size"),
        (|c| c.block_size = 4, "block_size"),
        (|c| c.block_size = 24, "block_size"),
        (|c| c.block_size = 1 << 62, "block_size"),
        (|c| c.max_num_seqs = 0, "max_num_seqs"),
        (|c| c.max_num_batched_tokens = 0, "max_num_batched_tokens"),
        (|c| c.max_num_batched_tokens = 64, "max_num_batched_tokens"),
        (
            |c| c.long_prefill_token_threshold = Some(0),
            "long_prefill_token_threshold",
        ),
        (|c| c.num_kv_blocks = Some(0), "num_kv_blocks"),
        (|c| c.num_kv_blocks = Some(usize::MAX), "num_kv_blocks"),
        (|c| c.kv_cache_memory_bytes = 0, "kv_cache_memory_bytes"),
        (|c| c.kv_cache_memory_bytes = 1000, "kv_cache_memory_bytes"),
        (
            |c| c.kv_cache_memory_bytes = usize::MAX,
            "kv_cache_memory_bytes",
        ),
        (|c| c.max_model_len = Some(0), "max_model_len"),
        (|c| c.max_model_len = Some(1), "max_model_len"),
        (|c| c.max_model_len = Some(1 << 40), "max_model_len"),
    ];
    for (change, setting) in cases {
        let mut config = EngineConfig::default();
        change(&mut config);
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
