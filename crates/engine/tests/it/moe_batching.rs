//! The mixture of experts batched: a small random-weight Qwen3-MoE (Q4_0, 16 experts, 4 per
//! token, one dense layer among the sparse ones) gives each of 16 requests the same tokens
//! and logprobs, bit for bit, alone and all 16 batched with chunked prefill, where every step
//! runs each active expert once over the rows of many requests.

use tokenmill_engine::config::model_config::{ModelConfig, MoeConfig};
use tokenmill_engine::models::checkpoint::{DummyCheckpoint, DummyDType};
use tokenmill_engine::sample::sampled_token::SampledToken;
use tokenmill_engine::{Completion, Engine, EngineConfig, Request, SamplingParams};

const TOP_LOGPROBS: usize = 5;

/// Qwen3-30B-A3B's architecture at a size two cores run in seconds.
fn tiny_moe() -> ModelConfig {
    ModelConfig {
        vocab_size: 2048,
        hidden_size: 256,
        intermediate_size: 512,
        num_layers: 4,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 64,
        max_position_embeddings: 1024,
        eos_token_ids: Vec::new(),
        moe: Some(MoeConfig {
            num_experts: 16,
            experts_per_token: 4,
            expert_intermediate_size: 128,
            norm_topk_prob: true,
            decoder_sparse_step: 1,
            mlp_only_layers: vec![1],
        }),
        ..ModelConfig::qwen3_30b_a3b()
    }
}

fn engine(max_num_batched_tokens: usize) -> Engine {
    let mut ckpt = DummyCheckpoint::from_config(tiny_moe(), DummyDType::Q4_0, 11, "tiny-moe");
    Engine::load(
        &mut ckpt,
        EngineConfig {
            num_kv_blocks: Some(128),
            max_num_batched_tokens,
            max_num_seqs: 16,
            ..EngineConfig::default()
        },
    )
    .expect("the tiny MoE loads")
}

/// 16 prompts of 3 to 63 tokens, from a fixed generator.
fn requests() -> Vec<Request> {
    let mut seed = 0x2545_F491_u32;
    (0..16)
        .map(|i| {
            let len = 3 + (i * 29) % 61;
            let prompt = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed % 2048
                })
                .collect();
            Request {
                prompt,
                params: SamplingParams {
                    logprobs: Some(TOP_LOGPROBS),
                    ..SamplingParams::greedy(8)
                },
                priority: 0,
                constraint: None,
            }
        })
        .collect()
}

/// A token's id, logprob bits and top logprobs' `(id, bits)`.
type TokenBits = (u32, u32, Vec<(u32, u32)>);

/// A token's id, logprob and top logprobs as bits, so -0.0 and 0.0 or a one-ulp drift differ.
fn bits(t: &SampledToken) -> TokenBits {
    let lp = t.logprob.expect("logprobs were requested");
    let top = t
        .top_logprobs
        .iter()
        .map(|&(id, l)| (id, l.to_bits()))
        .collect();
    (t.token_id, lp.to_bits(), top)
}

fn all_bits(c: &Completion) -> Vec<TokenBits> {
    c.tokens.iter().map(bits).collect()
}

#[test]
fn moe_tokens_and_logprobs_are_bit_identical_alone_and_in_a_batch_of_16() {
    let mut single = engine(512);
    let alone: Vec<Completion> = requests()
        .into_iter()
        .map(|r| single.generate(vec![r]).unwrap().remove(0))
        .collect();
    // 48 tokens a step: prompts prefill in chunks beside other requests' decodes.
    let batched = engine(48).generate(requests()).unwrap();
    assert_eq!(alone.len(), batched.len());
    for (i, (a, b)) in alone.iter().zip(&batched).enumerate() {
        assert_eq!(a.tokens.len(), 8, "request {i} generated all its tokens");
        assert_eq!(all_bits(a), all_bits(b), "request {i} differs when batched");
    }
    let distinct: std::collections::HashSet<Vec<u32>> =
        alone.iter().map(|c| c.token_ids()).collect();
    assert!(
        distinct.len() > 1,
        "the random model answers every prompt alike"
    );
}
