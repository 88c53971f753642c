//! The benchmark client on its own, until the `tokenmill` binary wires it in:
//! `cargo run --release --example bench -- serve --base-url http://127.0.0.1:8000 ...`.

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Serve(tokenmill_bench::BenchServeArgs),
    Sweep(tokenmill_bench::SweepArgs),
    Compare(tokenmill_bench::CompareArgs),
    Tune(tokenmill_bench::TuneArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => tokenmill_bench::run_serve(args),
        Command::Sweep(args) => tokenmill_bench::run_sweep(args),
        Command::Compare(args) => tokenmill_bench::run_compare(args),
        Command::Tune(args) => tokenmill_bench::run_tune(args),
    }
}
