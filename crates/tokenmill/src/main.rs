//! The `tokenmill` binary: one entry point for serving, offline generation, benchmarks and tuning.

mod chat;
mod engine_bench;
mod generate;
mod perplexity;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tokenmill",
    version,
    about = "An LLM serving engine and the benchmark that measures it"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(tokenmill_server::http::api_server::ServeArgs),
    /// Chat with a model in the terminal (fetched from the Hub if named there and not
    /// cached), each reply streamed; /bye or the end of input ends it.
    Run(chat::RunArgs),
    /// Generate completions for prompts, batched through the engine.
    Generate(generate::GenerateArgs),
    /// A text's perplexity, computed as llama.cpp's `llama-perplexity` computes it.
    Perplexity(perplexity::PerplexityArgs),
    /// Benchmarks: engine-only (latency, throughput) and over HTTP (serve, sweep, compare).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Start the server once per configuration of a search, load each with `bench serve`, and
    /// report the configuration with the highest goodput under P99 latency objectives.
    Tune(tokenmill_bench::TuneArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// One batch through the engine: prefill tok/s and per-token decode time.
    Latency(engine_bench::LatencyArgs),
    /// Many random requests through the engine: total and output tok/s.
    Throughput(engine_bench::ThroughputArgs),
    /// Load an OpenAI-compatible server and report TTFT, TPOT, ITL and throughput.
    Serve(tokenmill_bench::BenchServeArgs),
    /// Run `serve` at several load levels, several times each; write a table and charts.
    Sweep(tokenmill_bench::SweepArgs),
    /// Run the same sweep against several servers in turn; write one table and chart with all.
    Compare(tokenmill_bench::CompareArgs),
}

/// A failure (a refused flag, a bad model file, a port in use) is one line on stderr and
/// exit status 1: operators read the reason, not a `Debug` dump or a backtrace.
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // A chat shows the replies, not the server's log; RUST_LOG still asks for more.
    let level = match cli.command {
        Command::Run(_) => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", one_line(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error chain on one line. Some errors (candle's, under `RUST_BACKTRACE=1`) carry a
/// backtrace in their text; it is for developers, so only the first line is kept.
fn one_line(error: &anyhow::Error) -> String {
    let text = format!("{error:#}");
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => tokenmill_server::http::serve_command::run(args),
        Command::Run(args) => chat::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Bench(BenchCommand::Latency(args)) => engine_bench::latency(args),
        Command::Bench(BenchCommand::Throughput(args)) => engine_bench::throughput(args),
        Command::Bench(BenchCommand::Serve(args)) => tokenmill_bench::run_serve(args),
        Command::Bench(BenchCommand::Sweep(args)) => tokenmill_bench::run_sweep(args),
        Command::Bench(BenchCommand::Compare(args)) => tokenmill_bench::run_compare(args),
        Command::Tune(args) => tokenmill_bench::run_tune(args),
    }
}
