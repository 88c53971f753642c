//! tokenmill bench: measures any OpenAI-compatible server (tokenmill, vLLM, llama-server) the
//! way `vllm bench serve` does, sweeps load levels into tables and charts, and tunes a
//! server's scheduling flags against latency objectives.

mod args;
mod arrivals;
mod bench_request;
mod benchmark_result;
mod chart;
mod class_latencies;
mod client;
mod compare;
mod comparison;
mod cpu_time;
mod dataset;
mod distribution;
mod goodput;
mod grounded_prompts;
mod load_plan;
mod named_server;
mod open_chat_prompts;
mod pareto_frontier;
mod prepared_benchmark;
mod progress;
mod prompt_class;
mod random_prompts;
mod report;
mod request_rate;
mod saved_responses;
mod server;
mod spawn;
mod spec_decode_stats;
mod sse;
mod sweep;
mod sweep_summary;
mod token_counter;
mod tokenizer;
mod tune;
mod tune_chart;
mod tune_report;
mod tune_search;
mod tune_slos;
mod tune_space;
mod tune_trial;

pub use args::{
    CommonArgs, CompareArgs, DatasetKind, Endpoint, ServeArgs, SweepArgs, TuneArgs, TuneSearch,
};
pub use arrivals::ArrivalSchedule;
pub use benchmark_result::BenchmarkResult;
pub use compare::compare;
pub use comparison::{Comparison, ServerSweep};
pub use named_server::NamedServer;
pub use request_rate::RequestRate;
pub use spawn::SpawnedServer;
pub use sweep::sweep;
pub use sweep_summary::SweepSummary;
pub use tune::tune;
pub use tune_report::TuneReport;

use prepared_benchmark::{Load, PreparedBenchmark};

/// `bench serve`: runs the benchmark, prints the table and saves JSON when asked.
pub fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    runtime()?.block_on(serve(&args)).map(|_| ())
}

/// `bench sweep`: runs every level `--runs` times, then writes the summary, table and charts.
pub fn run_sweep(args: SweepArgs) -> anyhow::Result<()> {
    runtime()?.block_on(sweep::sweep(&args)).map(|_| ())
}

/// `bench compare`: sweeps each server in turn, then writes one table and one chart with all.
pub fn run_compare(args: CompareArgs) -> anyhow::Result<()> {
    runtime()?.block_on(compare::compare(&args)).map(|_| ())
}

/// `tune`: one server per configuration of the search, then the best one, the Pareto
/// frontiers, tune.json, tune.md and the chart.
pub fn run_tune(args: TuneArgs) -> anyhow::Result<()> {
    runtime()?.block_on(tune::tune(&args)).map(|_| ())
}

/// The async body of `bench serve`, returning the result for callers that want the numbers.
pub async fn serve(args: &ServeArgs) -> anyhow::Result<BenchmarkResult> {
    let common = &args.common;
    spawn::while_serving(common, async {
        let prepared = PreparedBenchmark::new(common).await?;
        let load = Load {
            max_concurrency: common.max_concurrency,
            request_rate: common.request_rate,
            arrival_seed: common.seed,
        };
        let result = prepared.run(load, "benchmark").await?;
        print!("{}", report::table(&result));
        if let Some(path) = &args.save_result {
            report::save_json(&report::to_json(&result), path)?;
            eprintln!("saved {}", path.display());
        }
        if let Some(path) = &args.save_responses {
            saved_responses::save(prepared.requests(), &result, path)?;
            eprintln!("saved {}", path.display());
        }
        Ok(result)
    })
    .await
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
