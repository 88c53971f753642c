//! The model zoo: tiny random-weight models of each architecture we load, held to Hugging Face
//! transformers' own float32 forward (`../shared/golden/zoo`, see its README).
//!
//! Every model is loaded from its safetensors directory and from its GGUF, on the exact path
//! (f32 weights, f32 KV cache). Prompts go through the paged KV cache in 4-token blocks with
//! chunked prefill (16 tokens a step, less than the longest prompt), alone and all four
//! batched together. The reference moves by under 1e-5 between float32 and float64 and
//! between attention kernels, so 1e-4 is room for summation order only; the bugs the zoo
//! was built to catch (plain RoPE instead of llama3 scaling, a dropped bias or norm weight,
//! an ignored `norm_topk_prob`) move logits by 0.8 to 5.5. For the mixture of experts, the
//! experts each prompt position is routed to must be the reference's, and their weights
//! within the same tolerance.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::config::WeightMode;
use tokenmill_engine::forward_batch::ForwardBatch;
use tokenmill_engine::kv::block_manager::{BlockId, BlockManager};
use tokenmill_engine::kv::kv_cache::KvCache;
use tokenmill_engine::models::checkpoint;
use tokenmill_engine::models::DecoderModel;
use tokenmill_engine::{Engine, EngineConfig, Request, SamplingParams};

mod sliding_window;

const LOGIT_TOL: f64 = 1e-4;
const BLOCK_SIZE: usize = 4;
/// Tokens per step: smaller than the 33- and 100-token prompts, so they prefill in chunks.
const TOKEN_BUDGET: usize = 16;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    prompt_ids: Vec<u32>,
    prompt_logits_top: TopK,
    greedy: Greedy,
    /// MoE only: per layer (`"0"`, `"1"`, …), the experts each prompt position picked.
    moe_routing: Option<BTreeMap<String, LayerRouting>>,
}

/// `experts[p]`: position `p`'s experts by descending probability; `weights[p]` theirs.
#[derive(Deserialize)]
struct LayerRouting {
    experts: Vec<Vec<u32>>,
    weights: Vec<Vec<f64>>,
}

/// `ids[p]` and `logits[p]`: the reference's 16 largest logits at position or step `p`.
#[derive(Deserialize)]
struct TopK {
    ids: Vec<Vec<u32>>,
    logits: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
struct Greedy {
    ids: Vec<u32>,
    top_ids: Vec<Vec<u32>>,
    top_logits: Vec<Vec<f64>>,
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Safetensors,
    Gguf,
}

fn zoo_dir(model: &str) -> PathBuf {
    crate::common::model::zoo(model)
}

fn reference(model: &str) -> Reference {
    let path = zoo_dir(model).join("reference.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: unreadable ({e})", path.display()));
    let r: Reference =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(r.cases.len(), 4, "{}: expected four cases", path.display());
    r
}

fn checkpoint_path(model: &str, format: Format) -> PathBuf {
    let dir = zoo_dir(model);
    match format {
        Format::Safetensors => dir,
        Format::Gguf => dir.join("model-f32.gguf"),
    }
}

fn load(model: &str, format: Format) -> tokenmill_engine::Result<DecoderModel> {
    let mut ckpt = checkpoint::open(&checkpoint_path(model, format))?;
    DecoderModel::load(&mut *ckpt, WeightMode::F32, 256)
}

fn kv_cache(model: &DecoderModel, blocks: usize) -> KvCache {
    let c = model.config();
    KvCache::new(
        c.num_layers,
        blocks,
        BLOCK_SIZE,
        c.kv_heads(),
        KvCacheDtype::F32,
    )
}

/// Largest |ours − reference| over the listed ids of one row.
fn row_error(ours: &[f32], ids: &[u32], want: &[f64]) -> f64 {
    ids.iter()
        .zip(want)
        .map(|(&id, &w)| (ours[id as usize] as f64 - w).abs())
        .fold(0.0, f64::max)
}

/// Lowest index wins ties, as the engine's greedy sampler does.
fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32
}

/// Teacher-forced logits at every prompt position, 16 positions a step, each its own
/// sampling row reading the earlier ones from the paged cache. Returns the worst error.
fn check_prompt_positions(model: &DecoderModel, case: &Case, what: &str) -> f64 {
    let vocab = model.config().vocab_size;
    let n = case.prompt_ids.len();
    let blocks = n.div_ceil(BLOCK_SIZE);
    let mut kv = kv_cache(model, blocks);
    let table = BlockManager::new(blocks, BLOCK_SIZE, false)
        .allocate(blocks)
        .expect("a fresh pool has every block");
    let mut worst: f64 = 0.0;
    for start in (0..n).step_by(TOKEN_BUDGET) {
        let end = (start + TOKEN_BUDGET).min(n);
        let mut batch = ForwardBatch::default();
        for pos in start..end {
            batch.push_seq(&case.prompt_ids[pos..=pos], pos, &table, BLOCK_SIZE, true);
        }
        let logits = model.forward(&batch, &mut kv).expect("forward");
        for (row, pos) in logits.chunks_exact(vocab).zip(start..end) {
            let top = &case.prompt_logits_top;
            let err = row_error(row, &top.ids[pos], &top.logits[pos]);
            assert!(
                err <= LOGIT_TOL,
                "{what} {}: prompt position {pos} logits {err:.2e} from the reference",
                case.name
            );
            worst = worst.max(err);
        }
        if let Some(routing) = &case.moe_routing {
            check_routing(model, routing, start..end, &format!("{what} {}", case.name));
        }
    }
    worst
}

/// The distinct experts the reference routes `positions` to in each layer, averaged over layers:
/// what a step over exactly those positions must report.
fn reference_active_experts(
    reference: &BTreeMap<String, LayerRouting>,
    positions: std::ops::Range<usize>,
) -> f64 {
    let per_layer = reference.values().map(|layer| {
        let mut seen: Vec<u32> = positions
            .clone()
            .flat_map(|p| layer.experts[p].iter().copied())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    });
    per_layer.sum::<usize>() as f64 / reference.len() as f64
}

/// The experts the last forward pass routed each of `positions` to (one row each, in order)
/// are the reference's, in its order, with weights within the logit tolerance; and the
/// distinct experts it counted per layer are the reference's.
fn check_routing(
    model: &DecoderModel,
    reference: &BTreeMap<String, LayerRouting>,
    positions: std::ops::Range<usize>,
    what: &str,
) {
    assert_eq!(
        model.last_active_experts(),
        Some(reference_active_experts(reference, positions.clone())),
        "{what} positions {positions:?}: distinct experts per layer"
    );
    let ours = model.last_routing();
    assert_eq!(
        ours.len(),
        reference.len(),
        "{what}: routing recorded for {} layers, the reference has {}",
        ours.len(),
        reference.len()
    );
    for (layer, choices) in ours.iter().enumerate() {
        let want = &reference[&layer.to_string()];
        let k = want.experts[0].len();
        assert_eq!(choices.len(), positions.len() * k, "{what} layer {layer}");
        for (picked, pos) in choices.chunks_exact(k).zip(positions.clone()) {
            let experts: Vec<u32> = picked.iter().map(|c| c.expert).collect();
            assert_eq!(
                experts, want.experts[pos],
                "{what} layer {layer} position {pos}: experts differ"
            );
            for (c, &w) in picked.iter().zip(&want.weights[pos]) {
                assert!(
                    (c.weight as f64 - w).abs() <= LOGIT_TOL,
                    "{what} layer {layer} position {pos}: expert {} weight {} (reference {w})",
                    c.expert,
                    c.weight
                );
            }
        }
    }
}

/// One sequence being generated: the prompt then its greedy tokens, `fed` of them in the
/// cache, and the logits of every step so far.
struct Running<'a> {
    case: &'a Case,
    table: Vec<BlockId>,
    tokens: Vec<u32>,
    fed: usize,
    steps: Vec<Vec<f32>>,
}

/// Greedy generation of `cases` together, as a scheduler would run them: each step spends at
/// most `TOKEN_BUDGET` tokens, decodes first-come, and a prompt that does not fit continues
/// next step. Checks every step's logits and the greedy tokens; returns the worst error.
fn check_generation(model: &DecoderModel, cases: &[&Case], what: &str) -> f64 {
    let vocab = model.config().vocab_size;
    let steps = cases[0].greedy.ids.len();
    let per_seq = |c: &Case| (c.prompt_ids.len() + steps).div_ceil(BLOCK_SIZE);
    let blocks: usize = cases.iter().map(|c| per_seq(c)).sum();
    let mut pool = BlockManager::new(blocks, BLOCK_SIZE, false);
    let mut kv = kv_cache(model, blocks);
    let mut seqs: Vec<Running> = cases
        .iter()
        .map(|&case| Running {
            case,
            table: pool.allocate(per_seq(case)).expect("pool sized for all"),
            tokens: case.prompt_ids.clone(),
            fed: 0,
            steps: Vec::new(),
        })
        .collect();
    while seqs.iter().any(|s| s.steps.len() < steps) {
        // 1. Fill the step's budget: each unfinished sequence feeds what it has not yet fed.
        let mut batch = ForwardBatch::default();
        let mut pushed = Vec::new();
        let mut budget = TOKEN_BUDGET;
        for (i, s) in seqs.iter().enumerate() {
            if s.steps.len() == steps || budget == 0 {
                continue;
            }
            let n = (s.tokens.len() - s.fed).min(budget);
            let sample = s.fed + n == s.tokens.len();
            batch.push_seq(
                &s.tokens[s.fed..s.fed + n],
                s.fed,
                &s.table,
                BLOCK_SIZE,
                sample,
            );
            budget -= n;
            pushed.push((i, n, sample));
        }
        // 2. One forward; a sampling row's argmax is its next token.
        let logits = model.forward(&batch, &mut kv).expect("forward");
        let mut rows = logits.chunks_exact(vocab);
        for (i, n, sample) in pushed {
            let s = &mut seqs[i];
            s.fed += n;
            if sample {
                let row = rows.next().expect("one logits row per sampling sequence");
                s.tokens.push(argmax(row));
                s.steps.push(row.to_vec());
            }
        }
    }
    // 3. Compare every step's top-16 logits, then the tokens they chose.
    let mut worst: f64 = 0.0;
    for s in &seqs {
        let g = &s.case.greedy;
        for (step, row) in s.steps.iter().enumerate() {
            let err = row_error(row, &g.top_ids[step], &g.top_logits[step]);
            assert!(
                err <= LOGIT_TOL,
                "{what} {}: greedy step {step} logits {err:.2e} from the reference",
                s.case.name
            );
            worst = worst.max(err);
        }
        assert_eq!(
            &s.tokens[s.case.prompt_ids.len()..],
            &g.ids[..],
            "{what} {}: greedy tokens differ",
            s.case.name
        );
    }
    worst
}

fn check_model(model: &str, format: Format) {
    let what = format!("{model} ({format:?})");
    let reference = reference(model);
    let llama = load(model, format).unwrap_or_else(|e| panic!("{what} does not load: {e}"));
    let sparse = llama.config().moe.is_some();
    assert!(
        reference
            .cases
            .iter()
            .all(|c| c.moe_routing.is_some() == sparse),
        "{what}: a mixture of experts must be checked against recorded routing, and only it"
    );
    let mut worst: f64 = 0.0;
    for case in &reference.cases {
        worst = worst.max(check_prompt_positions(&llama, case, &what));
        worst = worst.max(check_generation(&llama, &[case], &what));
    }
    let all: Vec<&Case> = reference.cases.iter().collect();
    worst = worst.max(check_generation(&llama, &all, &format!("{what} batched")));
    eprintln!("{what}: max |Δlogit| {worst:.2e} (tolerance {LOGIT_TOL:e})");
}

#[test]
fn tiny_qwen3_from_safetensors_matches_transformers() {
    check_model("tiny-qwen3", Format::Safetensors);
}

#[test]
fn tiny_qwen3_from_gguf_matches_transformers() {
    check_model("tiny-qwen3", Format::Gguf);
}

#[test]
fn tiny_llama3_from_safetensors_matches_transformers() {
    check_model("tiny-llama3", Format::Safetensors);
}

#[test]
fn tiny_llama3_from_gguf_matches_transformers() {
    check_model("tiny-llama3", Format::Gguf);
}

#[test]
fn tiny_qwen2_from_safetensors_matches_transformers() {
    check_model("tiny-qwen2", Format::Safetensors);
}

#[test]
fn tiny_qwen2_from_gguf_matches_transformers() {
    check_model("tiny-qwen2", Format::Gguf);
}

/// Sliding-window attention (window 8) on six of its seven layers, positions to 123.
#[test]
fn tiny_gemma3_from_safetensors_matches_transformers() {
    check_model("tiny-gemma3", Format::Safetensors);
}

/// The same through llama.cpp's conventions: stored `1 + w` norms, every sixth layer
/// global by rule, `key_length^-0.5` scores with the difference in the q-norm.
#[test]
fn tiny_gemma3_from_gguf_matches_transformers() {
    check_model("tiny-gemma3", Format::Gguf);
}

#[test]
fn tiny_qwen3_moe_from_safetensors_matches_transformers_and_routes_each_position_alike() {
    check_model("tiny-qwen3-moe", Format::Safetensors);
}

#[test]
fn tiny_qwen3_moe_from_gguf_matches_transformers_and_routes_each_position_alike() {
    check_model("tiny-qwen3-moe", Format::Gguf);
}

/// The same models through the engine itself: its scheduler chunks the prompts (16 tokens a
/// step for four sequences, 8-token blocks, the smallest it accepts) and samples greedily,
/// and every case's 24 tokens must be the reference's.
#[test]
fn the_engine_generates_every_zoo_models_greedy_tokens_in_one_chunked_batch() {
    for model in [
        "tiny-llama3",
        "tiny-qwen2",
        "tiny-qwen3",
        "tiny-qwen3-moe",
        "tiny-gemma3",
    ] {
        for format in [Format::Safetensors, Format::Gguf] {
            let reference = reference(model);
            let mut ckpt = checkpoint::open(&checkpoint_path(model, format)).unwrap();
            let config = EngineConfig {
                weight_mode: WeightMode::F32,
                kv_cache_dtype: KvCacheDtype::F32,
                block_size: 8,
                num_kv_blocks: Some(64),
                max_num_batched_tokens: TOKEN_BUDGET,
                max_num_seqs: 4,
                ..EngineConfig::default()
            };
            let mut engine = Engine::load(&mut *ckpt, config)
                .unwrap_or_else(|e| panic!("{model} ({format:?}) does not load: {e}"));
            let requests = reference
                .cases
                .iter()
                .map(|c| Request {
                    prompt: c.prompt_ids.clone(),
                    params: SamplingParams::greedy(c.greedy.ids.len()),
                    priority: 0,
                    constraint: None,
                })
                .collect();
            let done = engine.generate(requests).expect("generation");
            for (case, completion) in reference.cases.iter().zip(&done) {
                assert_eq!(
                    completion.token_ids(),
                    case.greedy.ids,
                    "{model} ({format:?}) {}: engine greedy tokens differ",
                    case.name
                );
            }
        }
    }
}

/// The engine's per-step count of distinct experts per MoE layer: a 7-token prompt's prefill
/// step touches what the reference routes those 7 positions to, the decode step after it one
/// token's top-2 in every layer; a dense model reports nothing.
#[test]
fn the_engine_reports_the_distinct_experts_each_step_ran_per_moe_layer() {
    let reference = reference("tiny-qwen3-moe");
    let case = reference
        .cases
        .iter()
        .find(|c| c.name == "len7")
        .expect("the len7 case");
    let routing = case.moe_routing.as_ref().expect("MoE routing");
    let prefill = reference_active_experts(routing, 0..case.prompt_ids.len());
    assert!(
        prefill > 2.0 && prefill < 8.0,
        "7 positions should wake more than one token's experts and fewer than all: {prefill}"
    );
    let config = EngineConfig {
        weight_mode: WeightMode::F32,
        kv_cache_dtype: KvCacheDtype::F32,
        block_size: 8,
        num_kv_blocks: Some(16),
        max_num_batched_tokens: TOKEN_BUDGET,
        max_num_seqs: 4,
        ..EngineConfig::default()
    };
    let mut ckpt = checkpoint::open(&checkpoint_path("tiny-qwen3-moe", Format::Gguf)).unwrap();
    let mut engine = Engine::load(&mut *ckpt, config.clone()).unwrap();
    assert_eq!(engine.stats().moe_active_experts.unwrap().count, 0);
    engine
        .generate(vec![Request {
            prompt: case.prompt_ids.clone(),
            params: SamplingParams::greedy(2),
            priority: 0,
            constraint: None,
        }])
        .unwrap();
    let moe = engine
        .stats()
        .moe_active_experts
        .expect("a MoE model reports experts");
    assert_eq!(moe.num_experts, 8);
    assert_eq!(
        (moe.count, moe.last),
        (2, 2.0),
        "prefill, then one decode of top-2"
    );
    assert_eq!(moe.sum, prefill + 2.0);

    let mut ckpt = checkpoint::open(&checkpoint_path("tiny-llama3", Format::Gguf)).unwrap();
    let dense = Engine::load(&mut *ckpt, config).unwrap();
    assert!(dense.stats().moe_active_experts.is_none());
}
