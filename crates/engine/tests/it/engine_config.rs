//! Engine configuration is validated in one step, before anything is allocated: each bad
//! setting is refused with its name, and the defaults pass. The command-line flags feed the
//! same step, so a bad flag is refused by the flag's name.

use clap::Parser;
use tokenmill_engine::config::model_config::ModelConfig;
use tokenmill_engine::models::checkpoint::{DummyCheckpoint, DummyDType};
use tokenmill_engine::{Engine, EngineArgs, EngineConfig, EngineError};

fn model() -> ModelConfig {
    ModelConfig::smollm2_135m()
}

#[test]
fn the_default_configuration_is_valid_and_sized_by_memory() {
    let plan = EngineConfig::default().plan(&model()).unwrap();
    let block_bytes = model().kv_bytes_per_token(EngineConfig::default().kv_cache_dtype) * 16;
    assert_eq!(plan.num_blocks, (2 << 30) / block_bytes);
    assert_eq!(plan.max_model_len, model().max_position_embeddings);
}

#[test]
fn each_bad_setting_is_refused_by_name() {
    type Change = fn(&mut EngineConfig);
    let cases: [(Change, &str); 19] = [
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
        (
            |c| c.max_num_partial_prefills = 0,
            "max_num_partial_prefills",
        ),
        (
            |c| c.max_long_partial_prefills = 0,
            "max_long_partial_prefills",
        ),
        (
            |c| c.max_long_partial_prefills = 5,
            "max_long_partial_prefills",
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
                "long_prefill_token_threshold = 0: must be at least 1 (omit it for the default): \
                 a cap of 0 schedules empty chunks"
            );
        }
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("a threshold of 0 was accepted"),
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    engine: EngineArgs,
}

fn flags(argv: &[&str]) -> EngineArgs {
    Cli::try_parse_from(std::iter::once("tokenmill").chain(argv.iter().copied()))
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"))
        .engine
}

#[test]
fn engine_flags_parse_from_an_argv_and_default_to_the_default_configuration() {
    let defaults = flags(&[]).engine_config().unwrap();
    assert_eq!(
        format!("{defaults:?}"),
        format!("{:?}", EngineConfig::default())
    );

    let args = flags(&[
        "--block-size",
        "32",
        "--kv-cache-memory-gib",
        "0.5",
        "--max-num-seqs",
        "8",
        "--no-enable-prefix-caching",
        "--threads",
        "2",
        "--target-itl-ms",
        "150",
    ]);
    assert_eq!(args.threads, Some(2));
    let config = args.engine_config().unwrap();
    assert_eq!(
        config.target_itl,
        Some(std::time::Duration::from_millis(150))
    );
    assert_eq!(config.block_size, 32);
    assert_eq!(config.kv_cache_memory_bytes, 1 << 29);
    assert_eq!(config.max_num_seqs, 8);
    assert!(!config.enable_prefix_caching);
    assert!(args.plan(&model()).is_ok());
}

#[test]
fn each_bad_flag_is_refused_by_the_flag_name_through_the_one_validation_step() {
    let cases: &[(&[&str], &str)] = &[
        (&["--threads", "0"], "--threads"),
        (&["--target-itl-ms", "0"], "--target-itl-ms"),
        (&["--target-itl-ms", "NaN"], "--target-itl-ms"),
        (&["--target-itl-ms=-5"], "--target-itl-ms"),
        (&["--kv-cache-memory-gib", "inf"], "--kv-cache-memory-gib"),
        (&["--kv-cache-memory-gib", "NaN"], "--kv-cache-memory-gib"),
        (&["--kv-cache-memory-gib=-1"], "--kv-cache-memory-gib"),
        (&["--kv-cache-memory-gib", "0"], "--kv-cache-memory-gib"),
        // Finite, but below one block or above the machine's memory: `plan` refuses the
        // bytes, and the refusal still names the flag in GiB.
        (
            &["--kv-cache-memory-gib", "0.0000001"],
            "--kv-cache-memory-gib",
        ),
        (
            &["--kv-cache-memory-gib", "100000"],
            "--kv-cache-memory-gib",
        ),
        (&["--load-format", "pt"], "--load-format"),
        (&["--block-size", "12"], "--block-size"),
        (
            &["--max-num-batched-tokens", "64"],
            "--max-num-batched-tokens",
        ),
        (
            &["--long-prefill-token-threshold", "0"],
            "--long-prefill-token-threshold",
        ),
        (&["--num-kv-blocks", "0"], "--num-kv-blocks"),
        (&["--max-model-len", "99999999"], "--max-model-len"),
        // Experts per token on a dense model: the override cannot apply.
        (
            &["--hf-overrides", r#"{"num_experts_per_tok": 2}"#],
            "--hf-overrides",
        ),
    ];
    for (argv, flag) in cases {
        let error = flags(argv).plan(&model()).unwrap_err();
        assert_eq!(error.flag(), *flag, "{argv:?}: {error}");
        assert!(!error.reason.is_empty());
    }
    let error = flags(&["--kv-cache-memory-gib", "0.0000001"])
        .plan(&model())
        .unwrap_err();
    assert_eq!(error.value, "0.0000001", "the value as typed, in GiB");
}

#[test]
fn building_an_engine_from_a_bad_flag_fails_with_one_line_naming_the_flag() {
    let args = flags(&[
        "--load-format",
        "dummy",
        "--model",
        "smollm2-135m",
        "--threads",
        "0",
    ]);
    match args.build_engine() {
        Err(error @ EngineError::InvalidFlag(_)) => assert_eq!(
            error.to_string(),
            "--threads 0: must be at least 1 (omit it to use every core)"
        ),
        Err(other) => panic!("expected a refused flag, got {other}"),
        Ok(_) => panic!("--threads 0 was accepted"),
    }
}

#[test]
fn hf_overrides_shrink_the_layers_the_kv_plan_is_sized_for_and_bad_ones_are_refused() {
    let model = tokenmill_engine::config::model_config::ModelConfig::qwen3_30b_a3b();
    let full = flags(&[]).plan(&model).unwrap();
    let eight = flags(&["--hf-overrides", r#"{"num_hidden_layers": 8}"#])
        .plan(&model)
        .unwrap();
    // The same KV memory holds six times the tokens of a sixth of the layers.
    assert_eq!(eight.num_blocks / 6, full.num_blocks);
    for bad in [
        r#"{"hidden_size": 8}"#,
        "[8]",
        r#"{"num_hidden_layers": 0}"#,
    ] {
        let argv = ["tokenmill", "--hf-overrides", bad];
        let err = match Cli::try_parse_from(argv) {
            Ok(_) => panic!("{bad} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("--hf-overrides"), "{bad}: {err}");
    }
}
