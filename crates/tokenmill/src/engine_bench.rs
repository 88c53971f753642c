//! Engine-only benchmarks (no HTTP): `bench latency` and `bench throughput`, our answers
//! to llama-bench and `vllm bench throughput`.

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;
use tokenmill_engine::kernels::compute_pool::ComputePool;
use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
use tokenmill_engine::kernels::int8_probe::Int8Probe;
use tokenmill_engine::kernels::read_bandwidth::ReadBandwidth;
use tokenmill_engine::{Completion, Engine, EngineArgs, Request, SamplingParams};

#[derive(Args, Debug)]
pub struct LatencyArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(long, default_value_t = 128)]
    pub input_len: usize,
    #[arg(long, default_value_t = 32)]
    pub output_len: usize,
    #[arg(long, default_value_t = 1)]
    pub batch_size: usize,
    /// Measured repetitions (after one warm-up).
    #[arg(long, default_value_t = 3)]
    pub num_iters: usize,
}

#[derive(Args, Debug)]
pub struct ThroughputArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(long, default_value_t = 64)]
    pub num_prompts: usize,
    #[arg(long, default_value_t = 256)]
    pub input_len: usize,
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Random prompts of exact lengths; EOS is ignored so every request makes `output_len` tokens.
fn random_requests(
    engine: &Engine,
    n: usize,
    input_len: usize,
    output_len: usize,
    rng: &mut StdRng,
) -> Vec<Request> {
    let vocab = engine.limits().vocab_size as u32;
    (0..n)
        .map(|_| Request {
            prompt: (0..input_len).map(|_| rng.random_range(0..vocab)).collect(),
            params: SamplingParams {
                ignore_eos: true,
                ..SamplingParams::greedy(output_len)
            },
            priority: 0,
            constraint: None,
        })
        .collect()
}

pub fn latency(args: LatencyArgs) -> anyhow::Result<()> {
    let mut engine_args = args.engine.clone();
    // The whole batch's prompts in one step, so "prefill" is one forward pass.
    engine_args.max_num_batched_tokens = engine_args
        .max_num_batched_tokens
        .max(args.batch_size * args.input_len);
    engine_args.no_enable_prefix_caching = true;
    let mut model = engine_args.build_engine()?;
    let mut rng = StdRng::seed_from_u64(0);
    let mut rows = Vec::new();
    // Read right after each measured run, on the same threads: the roofline of that moment.
    let probe = ReadBandwidth::new(256 << 20);
    let mut bandwidths = Vec::new();
    let mut warm = model.engine.step_times();
    // The first output token comes from the prefill; each later one is a decode step.
    let decode_steps = args.output_len.saturating_sub(1);
    for iter in 0..=args.num_iters {
        let requests = random_requests(
            &model.engine,
            args.batch_size,
            args.input_len,
            args.output_len,
            &mut rng,
        );
        let start = Instant::now();
        let done = model.engine.generate(requests)?;
        let (prefill_s, decode_s) = phases(start, &done);
        if iter == 0 {
            warm = model.engine.step_times();
            continue; // warm-up
        }
        let prefill_tps = (args.batch_size * args.input_len) as f64 / prefill_s;
        let step_ms = (decode_steps > 0).then(|| decode_s * 1e3 / decode_steps as f64);
        let bandwidth = probe.measure(3);
        println!(
            "iter {iter}: prefill {:.1} ms ({prefill_tps:.1} tok/s), {}, read bandwidth {:.1} GB/s",
            prefill_s * 1e3,
            decode_summary(step_ms, args.batch_size),
            bandwidth / 1e9
        );
        rows.push((prefill_tps, step_ms));
        bandwidths.push(bandwidth);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let prefill = median(rows.iter().map(|r| r.0).collect());
    let step = rows
        .iter()
        .map(|r| r.1)
        .collect::<Option<Vec<_>>>()
        .map(median);
    let bandwidth = median(bandwidths);
    println!(
        "model {} batch {} input {} output {}: median prefill {prefill:.1} tok/s, {}",
        model.name,
        args.batch_size,
        args.input_len,
        args.output_len,
        decode_summary(step, args.batch_size)
    );
    // One output token is the prefill's own: no decode step to set against the weights.
    if let (Some(bytes), Some(step)) = (model.engine.decode_weight_bytes(), step) {
        let floor_ms = bytes as f64 / bandwidth * 1e3;
        println!(
            "decode roofline: a step reads {:.1} MB of weights, {floor_ms:.2} ms at the {:.1} GB/s \
             read just after each run; decode runs at {:.0}% of it",
            bytes as f64 / 1e6,
            bandwidth / 1e9,
            100.0 * floor_ms / step
        );
    }
    if let Some(line) = prefill_roofline(&model.engine, prefill) {
        println!("{line}");
    }
    println!(
        "engine {}",
        model.engine.step_times().since(&warm).summary()
    );
    Ok(())
}

/// The prefill rate set against the int8 peak of the instructions the active kernel path
/// multiplies with, read now on the compute pool's threads (best of three). `None` for a
/// sparse model or a path without a probe.
fn prefill_roofline(engine: &Engine, prefill_tps: f64) -> Option<String> {
    let ops = engine.prompt_token_ops()? as f64;
    // The active path runs on this CPU, so its probe does too.
    let probe = Int8Probe::for_kernel(CpuKernel::active())?;
    let threads = ComputePool::global().threads();
    let peak = (0..3).map(|_| probe.measure(threads)).fold(0.0, f64::max);
    let rate = prefill_tps * ops;
    Some(format!(
        "prefill roofline: a prompt token's matmuls are {:.3} GOP, so {prefill_tps:.1} tok/s is \
         {:.0} GOP/s, {:.0}% of the {:.0} GOP/s int8 peak ({}, {threads} threads) read just after",
        ops / 1e9,
        rate / 1e9,
        100.0 * rate / peak,
        peak / 1e9,
        probe.name()
    ))
}

/// The decode phase in words: ms a step and tokens a second, or that there was none.
fn decode_summary(step_ms: Option<f64>, batch_size: usize) -> String {
    let Some(step_ms) = step_ms else {
        return "no decode steps (one output token)".to_string();
    };
    format!(
        "decode {step_ms:.2} ms/step ({:.1} tok/s)",
        batch_size as f64 * 1e3 / step_ms
    )
}

/// Seconds until the last first token (prefill) and from then to the last token (decode).
fn phases(start: Instant, done: &[Completion]) -> (f64, f64) {
    let first = done
        .iter()
        .filter_map(|c| c.timings.first_token)
        .max()
        .unwrap_or(start);
    let last = done
        .iter()
        .filter_map(|c| c.timings.finished)
        .max()
        .unwrap_or(first);
    ((first - start).as_secs_f64(), (last - first).as_secs_f64())
}

pub fn throughput(args: ThroughputArgs) -> anyhow::Result<()> {
    let mut model = args.engine.build_engine()?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let requests = random_requests(
        &model.engine,
        args.num_prompts,
        args.input_len,
        args.output_len,
        &mut rng,
    );
    let start = Instant::now();
    let done = model.engine.generate(requests)?;
    let elapsed = start.elapsed().as_secs_f64();
    let output: usize = done.iter().map(|c| c.tokens.len()).sum();
    let input: usize = done.iter().map(|c| c.prompt_tokens).sum();
    let stats = model.engine.stats();
    println!(
        "model {}: {} requests, {input} input + {output} output tokens in {elapsed:.2} s",
        model.name, args.num_prompts
    );
    println!(
        "throughput: {:.2} requests/s, {:.1} total tok/s, {:.1} output tok/s (preemptions: {})",
        args.num_prompts as f64 / elapsed,
        (input + output) as f64 / elapsed,
        output as f64 / elapsed,
        stats.num_preemptions
    );
    println!("engine {}", model.engine.step_times().summary());
    if let Some(moe) = &stats.moe_active_experts {
        println!(
            "moe: {:.1} of {} experts ran per MoE layer per step (mean over {} steps)",
            moe.mean().unwrap_or(0.0),
            moe.num_experts,
            moe.count
        );
    }
    Ok(())
}
