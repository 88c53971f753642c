//! Gemma 3's sliding-window layers in the engine: the same bits alone and batched across the
//! window, a window's pages held and freed, and no evicted window page ever reused.

use super::*;

/// tiny-gemma3 through the engine, each request alone and then all together in a pool small
/// enough to preempt, 16 tokens a step: every token and logprob has the same bits. Prompts
/// of 1 to 120 positions and 24 generated tokens cross its 8-position window (and the f16
/// cache's 16-position chunks) at every offset; half share a 40-token prefix, which the
/// batched run takes from the prefix cache. Its sliding layers' pages are released as the
/// window passes them (8-token blocks, so a block leaves the window every 8 positions).
#[test]
fn tiny_gemma3_gives_each_request_the_same_bits_alone_and_batched_across_its_window() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(37);
    let shared: Vec<u32> = (0..40).map(|_| rng.random_range(1..512)).collect();
    let prompts: Vec<Vec<u32>> = (0..12)
        .map(|i| {
            let len = 1 + (i * 23) % 120;
            let mut p: Vec<u32> = if i % 2 == 0 {
                shared.clone()
            } else {
                Vec::new()
            };
            p.extend((0..len).map(|_| rng.random_range(1..512)));
            p
        })
        .collect();
    let requests = || -> Vec<Request> {
        prompts
            .iter()
            .map(|p| Request {
                prompt: p.clone(),
                params: SamplingParams {
                    logprobs: Some(3),
                    ..SamplingParams::greedy(24)
                },
                priority: 0,
                constraint: None,
            })
            .collect()
    };
    for kv_cache_dtype in [
        KvCacheDtype::F16,
        KvCacheDtype::F32,
        KvCacheDtype::Q8_0,
        KvCacheDtype::Fp8,
    ] {
        let engine = |blocks: usize, prefix: bool| {
            let mut ckpt = checkpoint::open(&checkpoint_path("tiny-gemma3", Format::Gguf)).unwrap();
            let config = EngineConfig {
                weight_mode: WeightMode::F32,
                kv_cache_dtype,
                block_size: 8,
                num_kv_blocks: Some(blocks),
                max_num_batched_tokens: TOKEN_BUDGET,
                max_num_seqs: 8,
                enable_prefix_caching: prefix,
                ..EngineConfig::default()
            };
            Engine::load(&mut *ckpt, config).unwrap()
        };
        let mut alone = engine(64, false);
        let want: Vec<_> = requests()
            .into_iter()
            .map(|r| alone.generate(vec![r]).unwrap().remove(0))
            .collect();
        let mut together = engine(TOGETHER_PAGES, true);
        let got = together.generate(requests()).unwrap();
        assert!(
            together.stats().num_preemptions > 0,
            "{kv_cache_dtype:?}: the pool should have forced preemption"
        );
        assert!(
            together.stats().prefix_cache_hits > 0,
            "{kv_cache_dtype:?}: the shared prefix should have been reused"
        );
        assert_eq!(together.stats().kv_cache_usage, 0.0, "every page went back");
        for (i, (a, b)) in want.iter().zip(&got).enumerate() {
            // (token, logprob bits, top logprobs as (token, bits)) per generated token.
            type Bits = Vec<(u32, u32, Vec<(u32, u32)>)>;
            let bits = |c: &tokenmill_engine::Completion| -> Bits {
                c.tokens
                    .iter()
                    .map(|t| {
                        let top = t.top_logprobs.iter().map(|&(id, l)| (id, l.to_bits()));
                        (t.token_id, t.logprob.unwrap().to_bits(), top.collect())
                    })
                    .collect()
            };
            assert_eq!(
                bits(a),
                bits(b),
                "{kv_cache_dtype:?} request {i} ({} prompt tokens) differs batched",
                prompts[i].len()
            );
        }
    }
}

/// Pages of the batched tiny-gemma3 run: its longest request (184 tokens) fits alone only
/// because sliding layers hold a window's worth (23 full pages + 6 × 4 sliding); eight at
/// once run out and preempt.
const TOGETHER_PAGES: usize = 56;

/// tiny-gemma3 (1 global and 6 sliding layers, window 8) one 300-token sequence in a pool of
/// 64 pages of 8 tokens, 16 tokens a step: after every step it holds a page per block of
/// the global layer's group and at most 4 per sliding group (the window before a chunk and
/// the chunk: 7 + 16 positions), where keeping every position would take 7 pages a block
/// (266 for 38 blocks).
#[test]
fn tiny_gemma3_holds_every_block_of_its_global_layer_but_only_a_window_of_each_sliding_one() {
    let mut ckpt = checkpoint::open(&checkpoint_path("tiny-gemma3", Format::Gguf)).unwrap();
    const PAGES: usize = 64;
    let config = EngineConfig {
        weight_mode: WeightMode::F32,
        kv_cache_dtype: KvCacheDtype::F32,
        block_size: 8,
        num_kv_blocks: Some(PAGES),
        max_num_batched_tokens: TOKEN_BUDGET,
        max_num_seqs: 1,
        enable_prefix_caching: false,
        ..EngineConfig::default()
    };
    let mut engine = Engine::load(&mut *ckpt, config).unwrap();
    let groups = engine.model_config().kv_cache_groups();
    assert_eq!((groups.num_groups(), groups.group_size()), (7, 1));
    let capacity = engine.limits().kv_capacity;
    assert_eq!(capacity.short_context, PAGES / 7 * 8);
    assert!(capacity.one_sequence >= 300, "{capacity:?}");
    let prompt: Vec<u32> = (0..280).map(|i| 1 + (i * 37) % 500).collect();
    let (_, _events) = engine
        .add_request(Request {
            prompt,
            params: SamplingParams {
                ignore_eos: true,
                ..SamplingParams::greedy(20)
            },
            priority: 0,
            constraint: None,
        })
        .unwrap();
    let mut computed = 0;
    while engine.has_unfinished() {
        computed += engine.step().unwrap();
        if !engine.has_unfinished() {
            break;
        }
        let held = (engine.stats().kv_cache_usage * PAGES as f64).round() as usize;
        let full = computed.div_ceil(8);
        let sliding = held - full;
        assert!(
            sliding <= 6 * 4,
            "{computed} positions computed: {held} pages held, {full} of them the global layer's"
        );
        if computed > 16 {
            assert!(
                sliding >= 6,
                "each sliding group holds its window: {held} pages"
            );
        }
    }
    assert_eq!(
        computed,
        280 + 19,
        "the whole prompt, then a decode per token but the last"
    );
}

/// A repeated 200-token tiny-gemma3 prompt (25 times its window) is a prefix-cache hit of
/// all its full blocks but the last: the sliding layers' pages of the window before position
/// 192 are still cached though the window released them. The answer has the same bits as
/// without caching. Then a stream of other prompts evicts pages; the prompt, asked again,
/// takes whatever hit is left whole (perhaps none) and still answers the same bits.
#[test]
fn tiny_gemma3_reuses_a_long_prompt_past_its_window_and_never_reuses_evicted_window_pages() {
    let engine = |prefix: bool| {
        let mut ckpt = checkpoint::open(&checkpoint_path("tiny-gemma3", Format::Gguf)).unwrap();
        let config = EngineConfig {
            weight_mode: WeightMode::F32,
            kv_cache_dtype: KvCacheDtype::F16,
            block_size: 8,
            num_kv_blocks: Some(96),
            max_num_batched_tokens: TOKEN_BUDGET,
            max_num_seqs: 2,
            enable_prefix_caching: prefix,
            ..EngineConfig::default()
        };
        Engine::load(&mut *ckpt, config).unwrap()
    };
    let request = |prompt: &[u32]| Request {
        prompt: prompt.to_vec(),
        params: SamplingParams {
            logprobs: Some(2),
            ignore_eos: true,
            ..SamplingParams::greedy(8)
        },
        priority: 0,
        constraint: None,
    };
    let bits = |c: &tokenmill_engine::Completion| -> Vec<(u32, u32)> {
        c.tokens
            .iter()
            .map(|t| (t.token_id, t.logprob.unwrap().to_bits()))
            .collect()
    };
    let long: Vec<u32> = (0..200).map(|i| 1 + (i * 53 + 7) % 500).collect();
    let others: Vec<Vec<u32>> = (0..6)
        .map(|k| (0..120).map(|i| 1 + (i * 31 + k * 101) % 500).collect())
        .collect();
    let mut plain = engine(false);
    let want = bits(&plain.generate(vec![request(&long)]).unwrap()[0]);

    let mut cached = engine(true);
    assert_eq!(
        bits(&cached.generate(vec![request(&long)]).unwrap()[0]),
        want
    );
    let before = cached.stats().prefix_cache_hits;
    assert_eq!(
        bits(&cached.generate(vec![request(&long)]).unwrap()[0]),
        want
    );
    assert_eq!(
        cached.stats().prefix_cache_hits - before,
        192,
        "every full block but the last (one token is always computed)"
    );
    for other in &others {
        cached.generate(vec![request(other)]).unwrap();
    }
    let before = cached.stats().prefix_cache_hits;
    assert_eq!(
        bits(&cached.generate(vec![request(&long)]).unwrap()[0]),
        want
    );
    let hit = cached.stats().prefix_cache_hits - before;
    assert!(
        hit < 192,
        "other prompts should have evicted some of its pages: {hit}"
    );
    assert_eq!(cached.stats().kv_cache_usage, 0.0);
}
