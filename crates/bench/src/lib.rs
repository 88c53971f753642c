//! tokenmill bench: measures any OpenAI-compatible server (tokenmill, vLLM, llama-server) the
//! way `vllm bench serve` does, sweeps load levels into tables and charts, and tunes a
//! server's scheduling flags against latency objectives.

mod args;
mod datasets;
mod load;
mod named_server;
mod prepared_benchmark;
mod report;
mod spawn;
mod sweep;
mod tune;

pub use args::{
    BenchServeArgs, CommonArgs, CompareArgs, DatasetKind, SweepArgs, TuneArgs, TuneSearch,
};
pub use load::arrivals::ArrivalSchedule;
pub use load::endpoint::Endpoint;
pub use load::request_rate::RequestRate;
pub use named_server::NamedServer;
pub use report::benchmark_result::BenchmarkResult;
pub use spawn::SpawnedServer;
pub use sweep::comparison::{Comparison, ServerSweep};
pub use sweep::summary::SweepSummary;
pub use sweep::{compare, sweep};
pub use tune::report::TuneReport;
pub use tune::tune;

use prepared_benchmark::{Load, PreparedBenchmark};
use report::serve_report;

/// `bench serve`: runs the benchmark, prints the table and saves JSON when asked.
pub fn run_serve(args: BenchServeArgs) -> anyhow::Result<()> {
    runtime()?.block_on(serve(&args)).map(|_| ())
}

/// `bench sweep`: runs every level `--runs` times, then writes the summary, table and charts.
pub fn run_sweep(args: SweepArgs) -> anyhow::Result<()> {
    runtime()?.block_on(sweep::sweep(&args)).map(|_| ())
}

/// `bench compare`: sweeps each server in turn, then writes one table and one chart with all.
pub fn run_compare(args: CompareArgs) -> anyhow::Result<()> {
    runtime()?.block_on(sweep::compare(&args)).map(|_| ())
}

/// `tune`: one server per configuration of the search, then the best one, the Pareto
/// frontiers, tune.json, tune.md and the chart.
pub fn run_tune(args: TuneArgs) -> anyhow::Result<()> {
    runtime()?.block_on(tune::tune(&args)).map(|_| ())
}

/// The async body of `bench serve`, returning the result for callers that want the numbers.
pub async fn serve(args: &BenchServeArgs) -> anyhow::Result<BenchmarkResult> {
    let common = &args.common;
    spawn::while_serving(common, async {
        let prepared = PreparedBenchmark::new(common).await?;
        let load = Load {
            max_concurrency: common.max_concurrency,
            request_rate: common.request_rate,
            arrival_seed: common.seed,
        };
        let result = prepared.run(load, "benchmark").await?;
        print!("{}", serve_report::table(&result));
        if let Some(path) = &args.save_result {
            serve_report::save_json(&serve_report::to_json(&result), path)?;
            eprintln!("saved {}", path.display());
        }
        if let Some(path) = &args.save_responses {
            report::saved_responses::save(prepared.requests(), &result, path)?;
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
