//! Embedding requests: prefill-only sequences that end with a pooled final hidden state.
//!
//! Held to transformers: `tests/zoo_embeddings.json` (written by
//! `scripts/zoo-embeddings-reference.py`) has, for every zoo model and each of its four
//! reference prompts, the base model's normalized final-norm hidden state at the last
//! position and averaged over all of them. Every zoo model, from its safetensors and its
//! GGUF on the f32 path, must give vectors within cosine 0.99999 of those. Batched with each
//! other, with generate requests, in chunks across steps and through preemption, each
//! vector must be the bits it is alone; and a finished embedding holds no KV block.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tokenmill_engine::config::{KvCacheDtype, WeightMode};
use tokenmill_engine::models::checkpoint;
use tokenmill_engine::{
    EmbedRequest, Engine, EngineConfig, FinishReason, PoolerConfig, PoolingType, Request,
    RequestEvent, SamplingParams,
};
use tokio::sync::mpsc::UnboundedReceiver;

const MODELS: [&str; 5] = [
    "tiny-llama3",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-qwen3-moe",
    "tiny-gemma3",
];

/// What float32 summation order may move a unit vector by; a wrong norm, a dropped layer or
/// the wrong pooled row moves it by far more (cosine well under 0.99).
const MIN_COSINE: f64 = 0.99999;

/// Tokens per step: the 33- and 100-token prompts prefill in several chunks.
const TOKEN_BUDGET: usize = 16;

#[derive(Deserialize)]
struct Fixture {
    models: BTreeMap<String, BTreeMap<String, Case>>,
}

#[derive(Deserialize)]
struct Case {
    prompt_ids: Vec<u32>,
    last: Vec<f64>,
    mean: Vec<f64>,
}

/// The zoo's own reference: each case's prompt and its 24 greedy tokens.
fn reference_greedy(model: &str) -> Vec<(Vec<u32>, Vec<u32>)> {
    #[derive(Deserialize)]
    struct Reference {
        cases: Vec<ReferenceCase>,
    }
    #[derive(Deserialize)]
    struct ReferenceCase {
        prompt_ids: Vec<u32>,
        greedy: Greedy,
    }
    #[derive(Deserialize)]
    struct Greedy {
        ids: Vec<u32>,
    }
    let path = crate::common::model::zoo(model).join("reference.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let reference: Reference = serde_json::from_str(&text).unwrap();
    reference
        .cases
        .into_iter()
        .map(|c| (c.prompt_ids, c.greedy.ids))
        .collect()
}

fn fixture() -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/zoo_embeddings.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: unreadable ({e})", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn pooling(pooling_type: PoolingType) -> PoolerConfig {
    PoolerConfig {
        pooling_type,
        normalize: true,
    }
}

fn embed_request(prompt: &[u32], pooling_type: PoolingType) -> EmbedRequest {
    EmbedRequest {
        prompt: prompt.to_vec(),
        pooling: pooling(pooling_type),
        priority: 0,
    }
}

/// A zoo model's engine on the exact path: f32 weights and KV cache, 8-token blocks (the
/// smallest the engine takes), 16 tokens a step.
fn engine(model: &str, gguf: bool, num_kv_blocks: usize) -> Engine {
    let dir = crate::common::model::zoo(model);
    let path = if gguf {
        dir.join("model-f32.gguf")
    } else {
        dir
    };
    let mut ckpt = checkpoint::open(&path).unwrap();
    let config = EngineConfig {
        weight_mode: WeightMode::F32,
        kv_cache_dtype: KvCacheDtype::F32,
        block_size: 8,
        num_kv_blocks: Some(num_kv_blocks),
        max_num_batched_tokens: TOKEN_BUDGET,
        max_num_seqs: 12,
        ..EngineConfig::default()
    };
    Engine::load(&mut *ckpt, config).unwrap_or_else(|e| panic!("{model} does not load: {e}"))
}

fn cosine(ours: &[f32], want: &[f64]) -> f64 {
    assert_eq!(ours.len(), want.len(), "embedding width");
    let dot: f64 = ours.iter().zip(want).map(|(&a, &b)| a as f64 * b).sum();
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(&mut ours.iter().map(|&x| x as f64)) * norm(&mut want.iter().copied()))
}

/// Reads one embedding request's events to its end: its vector (exactly one), and that it
/// produced no token and finished as a stop with its prompt counted.
fn vector_of(mut rx: UnboundedReceiver<RequestEvent>, prompt_len: usize) -> Vec<f32> {
    let mut vector = None;
    while let Ok(event) = rx.try_recv() {
        match event {
            RequestEvent::Embedding { values } => {
                assert!(vector.replace(values).is_none(), "two vectors");
            }
            RequestEvent::Finished {
                reason,
                prompt_tokens,
                completion_tokens,
                ..
            } => {
                assert_eq!(reason, FinishReason::Stop);
                assert_eq!((prompt_tokens, completion_tokens), (prompt_len, 0));
                return vector.expect("the vector comes before Finished");
            }
            other => panic!("an embedding request sent {other:?}"),
        }
    }
    panic!("the embedding request did not finish")
}

/// Every case of `model` with both poolings, as (request, reference vector).
fn cases(fixture: &Fixture, model: &str) -> Vec<(EmbedRequest, Vec<f64>)> {
    let mut out = Vec::new();
    for case in fixture.models[model].values() {
        out.push((
            embed_request(&case.prompt_ids, PoolingType::Last),
            case.last.clone(),
        ));
        out.push((
            embed_request(&case.prompt_ids, PoolingType::Mean),
            case.mean.clone(),
        ));
    }
    out
}

#[test]
fn every_zoo_models_embeddings_match_transformers_with_both_poolings_batched_and_alone() {
    let fixture = fixture();
    assert_eq!(
        fixture.models.len(),
        MODELS.len(),
        "a fixture per zoo model"
    );
    for model in MODELS {
        let cases = cases(&fixture, model);
        assert_eq!(cases.len(), 8, "{model}: four prompts, two poolings");
        for gguf in [false, true] {
            let what = format!("{model} ({})", if gguf { "gguf" } else { "safetensors" });
            let mut engine = engine(model, gguf, 64);
            let requests = cases.iter().map(|(r, _)| r.clone()).collect();
            let batched = engine.embed(requests).unwrap();
            let mut worst: f64 = 1.0;
            for ((request, want), ours) in cases.iter().zip(&batched) {
                let name = format!(
                    "{what} {} tokens {:?}",
                    request.prompt.len(),
                    request.pooling.pooling_type
                );
                let c = cosine(ours, want);
                assert!(c >= MIN_COSINE, "{name}: cosine {c} to transformers");
                let norm: f64 = ours.iter().map(|&v| (v as f64).powi(2)).sum::<f64>();
                assert!((norm.sqrt() - 1.0).abs() < 1e-6, "{name}: not unit length");
                worst = worst.min(c);
                let alone = engine.embed(vec![request.clone()]).unwrap().remove(0);
                assert!(
                    alone
                        .iter()
                        .map(|v| v.to_bits())
                        .eq(ours.iter().map(|v| v.to_bits())),
                    "{name}: batched differs from alone"
                );
            }
            eprintln!(
                "{what}: 1 - cosine to transformers at most {:.1e}",
                1.0 - worst
            );
            assert_eq!(engine.stats().kv_cache_usage, 0.0, "{what}: KV held after");
        }
    }
}

/// Embedding and generate requests queued together, in a pool too small for all of them:
/// prompts span steps, the scheduler preempts, and yet each vector has the bits it has
/// alone, each generation the reference's greedy tokens, and the pool ends empty.
#[test]
fn embeddings_batched_with_generation_through_preemption_equal_each_alone_bit_for_bit() {
    let fixture = fixture();
    for model in ["tiny-qwen3", "tiny-qwen3-moe"] {
        let cases = cases(&fixture, model);
        let alone: Vec<Vec<f32>> = {
            let mut engine = engine(model, true, 64);
            cases
                .iter()
                .map(|(r, _)| engine.embed(vec![r.clone()]).unwrap().remove(0))
                .collect()
        };
        // 16 pages of 8 tokens: the 100-token prompt with its 24 tokens takes all but one.
        let mut engine = engine(model, true, 16);
        let greedy = reference_greedy(model);
        let mut embeds = Vec::new();
        let mut generations = Vec::new();
        for (i, (request, _)) in cases.iter().enumerate() {
            let len = request.prompt.len();
            embeds.push((engine.add_embedding(request.clone()).unwrap().1, len));
            if i % 2 == 0 {
                let (prompt, want) = &greedy[i / 2];
                let req = Request {
                    prompt: prompt.clone(),
                    params: SamplingParams::greedy(want.len()),
                    priority: 0,
                    constraint: None,
                };
                generations.push((engine.add_request(req).unwrap().1, want.clone()));
            }
        }
        while engine.has_unfinished() {
            engine.step().unwrap();
        }
        assert!(
            engine.stats().num_preemptions > 0,
            "{model}: the pool was meant to force preemption"
        );
        for (i, ((rx, len), want)) in embeds.into_iter().zip(&alone).enumerate() {
            let ours = vector_of(rx, len);
            assert!(
                ours.iter()
                    .map(|v| v.to_bits())
                    .eq(want.iter().map(|v| v.to_bits())),
                "{model} embedding {i}: batched with generation differs from alone"
            );
        }
        for (rx, want) in generations {
            let done = tokenmill_engine::core::completion::collect_completion(rx).unwrap();
            assert_eq!(&done.token_ids(), &want, "{model}: greedy tokens");
        }
        assert_eq!(engine.stats().kv_cache_usage, 0.0, "{model}: KV held after");
    }
}

/// Pages an embedding took go back as its prompt ends, while a generate request beside it
/// still holds its own; a last-token embedding of a cached prompt reuses its blocks and a
/// mean one recomputes every position, both to the same bits.
#[test]
fn finished_embeddings_hold_no_kv_and_cached_prefixes_change_no_bits() {
    let fixture = fixture();
    let case = &fixture.models["tiny-llama3"]["len100"];
    let mut engine = engine("tiny-llama3", false, 64);
    let gen = Request {
        prompt: case.prompt_ids[..7].to_vec(),
        params: SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(100)
        },
        priority: 0,
        constraint: None,
    };
    let (_, _gen_rx) = engine.add_request(gen).unwrap();
    let (_, rx) = engine
        .add_embedding(embed_request(&case.prompt_ids, PoolingType::Last))
        .unwrap();
    let mut held_with_embedding: f64 = 0.0;
    let mut vector = None;
    let mut rx = Some(rx);
    while vector.is_none() {
        engine.step().unwrap();
        let usage = engine.stats().kv_cache_usage;
        held_with_embedding = held_with_embedding.max(usage);
        if engine.stats().num_running == 1 {
            vector = Some(vector_of(rx.take().unwrap(), case.prompt_ids.len()));
        }
    }
    let usage_generating_alone = engine.stats().kv_cache_usage;
    assert!(
        usage_generating_alone < held_with_embedding,
        "the embedding's pages went back ({usage_generating_alone} vs {held_with_embedding})"
    );
    let first = vector.unwrap();
    while engine.has_unfinished() {
        engine.step().unwrap();
    }
    assert_eq!(engine.stats().kv_cache_usage, 0.0);
    // Again from the prefix cache (its blocks were registered as they filled).
    let (_, rx) = engine
        .add_embedding(embed_request(&case.prompt_ids, PoolingType::Last))
        .unwrap();
    while engine.has_unfinished() {
        engine.step().unwrap();
    }
    let cached = vector_of(rx, case.prompt_ids.len());
    assert_eq!(
        first, cached,
        "a prefix-cache hit changes the last-token vector"
    );
    let stats = engine.stats();
    assert!(
        stats.prefix_cache_hits > 0,
        "the second embedding hit the cache"
    );
    let hits_before = stats.prefix_cache_hits;
    let mean = engine
        .embed(vec![embed_request(&case.prompt_ids, PoolingType::Mean)])
        .unwrap();
    assert_eq!(
        engine.stats().prefix_cache_hits,
        hits_before,
        "a mean embedding takes no prefix-cache hit"
    );
    let cosine = cosine(&mean[0], &case.mean);
    assert!(cosine >= MIN_COSINE, "mean after a cached run: {cosine}");
    assert_eq!(engine.stats().kv_cache_usage, 0.0);
}

#[test]
fn embedding_inputs_may_fill_the_context_and_no_more() {
    let mut engine = engine("tiny-qwen2", true, 64);
    let max = engine.limits().max_model_len;
    let fits = embed_request(&vec![5; max], PoolingType::Last);
    assert!(engine.limits().validate_embedding(&fits).is_ok());
    for (prompt, says) in [
        (vec![5; max + 1], "max_model_len"),
        (vec![], "empty"),
        (vec![100_000], "outside the vocabulary"),
    ] {
        let err = engine
            .add_embedding(embed_request(&prompt, PoolingType::Mean))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{err}");
    }
    assert!(!engine.has_unfinished());
}
