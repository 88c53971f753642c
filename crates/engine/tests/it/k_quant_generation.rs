//! A tiny model with K-quant weights (every matrix and the embedding in Q4K, Q5K or Q6K,
//! the output projection its own or tied to the embedding) generates the same greedy
//! tokens, with the same logprobs to the bit, on every CPU path this machine has.
//!
//! The path is fixed per process (`TOKENMILL_CPU_KERNEL`), so the test runs itself as a
//! child process once per path and compares the tokens the children print.

use std::process::Command;
use tokenmill_engine::config::model_config::ModelConfig;
use tokenmill_engine::kernels::cpu_kernel::{CpuKernel, KERNEL_ENV};
use tokenmill_engine::models::checkpoint::{DummyCheckpoint, DummyDType};
use tokenmill_engine::{Engine, EngineConfig, Request, SamplingParams};

/// Set in the children: generate and print instead of spawning.
const CHILD: &str = "TOKENMILL_K_QUANT_CHILD";
const TEST: &str = "a_tiny_k_quant_model_generates_the_same_greedy_tokens_on_every_cpu_path";

/// Greedy tokens, each with its logprob's bits (so the logits must agree bit for bit), of
/// a two-layer model whose every width is a multiple of 256; `tied`: the output projection
/// is the K-quant embedding table itself.
fn generate(dtype: DummyDType, tied: bool) -> Vec<(u32, u32)> {
    let config = ModelConfig {
        vocab_size: 768,
        hidden_size: 256,
        intermediate_size: 512,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 64,
        tie_word_embeddings: tied,
        ..ModelConfig::smollm2_135m()
    };
    let mut ckpt = DummyCheckpoint::from_config(config, dtype, 7, "tiny-k-quant");
    let mut engine = Engine::load(
        &mut ckpt,
        EngineConfig {
            num_kv_blocks: Some(16),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let done = engine
        .generate(vec![Request {
            prompt: vec![1, 20, 300, 45, 500, 6, 70, 700],
            params: SamplingParams {
                ignore_eos: true,
                logprobs: Some(0),
                ..SamplingParams::greedy(16)
            },
            priority: 0,
            constraint: None,
        }])
        .unwrap();
    done[0]
        .tokens
        .iter()
        .map(|t| (t.token_id, t.logprob.expect("logprobs asked").to_bits()))
        .collect()
}

/// The children's printed token lines, one per K-quant dtype.
fn tokens_on(kernel: CpuKernel) -> Vec<String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg(crate::common::libtest_name(module_path!(), TEST))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env(KERNEL_ENV, kernel.name())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{kernel} child failed:\n{stdout}");
    stdout
        .lines()
        // libtest may print the test's name on the same line first.
        .filter_map(|l| l.find("tokens ").map(|at| l[at..].to_owned()))
        .collect()
}

#[test]
fn a_tiny_k_quant_model_generates_the_same_greedy_tokens_on_every_cpu_path() {
    if std::env::var_os(CHILD).is_some() {
        for dtype in [DummyDType::Q4K, DummyDType::Q5K, DummyDType::Q6K] {
            for tied in [false, true] {
                println!("tokens {dtype:?} tied {tied}: {:?}", generate(dtype, tied));
            }
        }
        return;
    }
    let portable = tokens_on(CpuKernel::Portable);
    assert_eq!(portable.len(), 6, "{portable:?}");
    for kernel in CpuKernel::supported().into_iter().skip(1) {
        assert_eq!(tokens_on(kernel), portable, "{kernel}");
    }
}
