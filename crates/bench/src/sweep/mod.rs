//! `bench sweep`: serve runs repeated at every load level, summarised into JSON, a table and
//! charts; `bench compare`: the same sweep against several servers, started one after the
//! other on one address, written as one table and one chart.

pub mod chart;
pub mod comparison;
pub mod summary;

use std::collections::HashSet;
use std::path::Path;

use crate::args::{CompareArgs, SweepArgs};
use crate::load::request_rate::RequestRate;
use crate::prepared_benchmark::{Load, PreparedBenchmark};
use crate::report::serve_report;
use crate::spawn;
use crate::sweep::comparison::{Comparison, ServerSweep};
use crate::sweep::summary::{LevelSummary, SweepAxis, SweepSummary};

/// One load level and how it sets the run's load.
#[derive(Clone, Copy, Debug)]
struct Level {
    axis: SweepAxis,
    value: f64,
}

impl Level {
    fn load(self, args: &SweepArgs, run: usize) -> anyhow::Result<Load> {
        let common = &args.common;
        let arrival_seed = common.seed.wrapping_add(run as u64);
        Ok(match self.axis {
            SweepAxis::Concurrency => Load {
                max_concurrency: Some(self.value as usize),
                request_rate: common.request_rate,
                arrival_seed,
            },
            SweepAxis::RequestRate => Load {
                max_concurrency: common.max_concurrency,
                request_rate: RequestRate::per_second(self.value)?,
                arrival_seed,
            },
        })
    }

    /// File-name stem of one run's result, e.g. `concurrency-16-run2`.
    fn run_name(self, run: usize) -> String {
        let axis = match self.axis {
            SweepAxis::Concurrency => "concurrency",
            SweepAxis::RequestRate => "rate",
        };
        format!("{axis}-{}-run{run}", self.value)
    }
}

fn levels(args: &SweepArgs) -> anyhow::Result<Vec<Level>> {
    let levels: Vec<Level> = match (args.concurrency.is_empty(), args.request_rates.is_empty()) {
        (false, true) => {
            if args.concurrency.contains(&0) {
                anyhow::bail!("--concurrency levels must be at least 1");
            }
            args.concurrency
                .iter()
                .map(|&c| Level {
                    axis: SweepAxis::Concurrency,
                    value: c as f64,
                })
                .collect()
        }
        (true, false) => {
            for &rate in &args.request_rates {
                RequestRate::per_second(rate)?;
            }
            args.request_rates
                .iter()
                .map(|&r| Level {
                    axis: SweepAxis::RequestRate,
                    value: r,
                })
                .collect()
        }
        _ => anyhow::bail!("give exactly one of --concurrency or --request-rates"),
    };
    if args.runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    Ok(levels)
}

/// Runs the sweep and writes summary.json, sweep.svg, sweep.png, table.md and runs/*.json,
/// and ttft_by_class.svg and .png when the runs had short and long prompts.
pub async fn sweep(args: &SweepArgs) -> anyhow::Result<SweepSummary> {
    let levels = levels(args)?;
    let mut common = args.common.clone();
    // The table reports P99 ITL whatever percentiles were asked for.
    if !common.percentiles.contains(&99.0) {
        common.percentiles.push(99.0);
    }
    let runs_dir = args.output_dir.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", runs_dir.display()))?;
    spawn::while_serving(&common, async {
        let prepared = PreparedBenchmark::new(&common).await?;
        let mut summaries = Vec::with_capacity(levels.len());
        for level in &levels {
            summaries.push(run_level(&prepared, args, *level, &runs_dir).await?);
        }
        let summary = SweepSummary {
            axis: levels[0].axis,
            model_id: prepared.model().to_owned(),
            backend: prepared.backend().to_owned(),
            runs_per_level: args.runs,
            levels: summaries,
        };
        write_outputs(&summary, &args.output_dir)?;
        Ok(summary)
    })
    .await
}

async fn run_level(
    prepared: &PreparedBenchmark,
    args: &SweepArgs,
    level: Level,
    runs_dir: &Path,
) -> anyhow::Result<LevelSummary> {
    let mut results = Vec::with_capacity(args.runs);
    for run in 1..=args.runs {
        let label = format!(
            "{} {} run {run}/{}",
            level.axis.title(),
            level.value,
            args.runs
        );
        let result = prepared.run(level.load(args, run)?, &label).await?;
        let json = serve_report::to_json(&result);
        serve_report::save_json(
            &json,
            &runs_dir.join(format!("{}.json", level.run_name(run))),
        )?;
        eprintln!(
            "{label}: {:.1} output tok/s, median TTFT {:.1} ms{}, median TPOT {:.1} ms, {} failed",
            result.output_throughput,
            result.ttft.median,
            class_ttfts(&result),
            result.tpot.median,
            result.failed
        );
        results.push(json);
    }
    LevelSummary::from_runs(level.value, &results)
}

/// `" (short 120.0, long 3000.0)"`: each class's median TTFT, when the run had two.
fn class_ttfts(result: &crate::report::benchmark_result::BenchmarkResult) -> String {
    if result.by_class.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = result
        .by_class
        .iter()
        .map(|c| format!("{} {:.1}", c.class.name(), c.ttft.median))
        .collect();
    format!(" ({})", parts.join(", "))
}

fn write_outputs(summary: &SweepSummary, dir: &Path) -> anyhow::Result<()> {
    serve_report::save_json(&serde_json::to_value(summary)?, &dir.join("summary.json"))?;
    let table = summary.markdown_table();
    std::fs::write(dir.join("table.md"), &table)?;
    println!("\n{table}");
    crate::sweep::chart::draw(summary, &dir.join("sweep.svg"), &dir.join("sweep.png"))?;
    let mut written = "summary.json,table.md,sweep.svg,sweep.png,runs/".to_owned();
    if summary.has_classes() {
        crate::sweep::chart::draw_by_class(
            summary,
            &dir.join("ttft_by_class.svg"),
            &dir.join("ttft_by_class.png"),
        )?;
        written.push_str(",ttft_by_class.svg,ttft_by_class.png");
    }
    eprintln!("wrote {}/{{{written}}}", dir.display());
    Ok(())
}

/// Sweeps every `--server` in the order given, then writes comparison.json, table.md,
/// comparison.svg and comparison.png (and ttft_by_class.svg and .png when the runs mixed short
/// and long prompts); each server's own sweep outputs go to its folder.
pub async fn compare(args: &CompareArgs) -> anyhow::Result<Comparison> {
    check_names(args)?;
    let mut sweeps = Vec::with_capacity(args.servers.len());
    for server in &args.servers {
        eprintln!("== {}: {}", server.name, server.command);
        // Each sweep stops its server (and waits for it to exit) before the next one starts,
        // so the servers never share the port or the CPU.
        let summary = sweep(&args.sweep_for(server)).await?;
        sweeps.push(ServerSweep {
            name: server.name.clone(),
            summary,
        });
    }
    let comparison = Comparison::new(sweeps)?;
    write_comparison(&comparison, &args.output_dir)?;
    Ok(comparison)
}

/// Names become folders and table columns, so two servers may not share one.
fn check_names(args: &CompareArgs) -> anyhow::Result<()> {
    let mut seen = HashSet::new();
    if let Some(twice) = args.servers.iter().find(|s| !seen.insert(&s.name)) {
        anyhow::bail!("two servers are named {:?}", twice.name);
    }
    Ok(())
}

fn write_comparison(comparison: &Comparison, dir: &Path) -> anyhow::Result<()> {
    serve_report::save_json(
        &serde_json::to_value(comparison)?,
        &dir.join("comparison.json"),
    )?;
    let table = comparison.markdown_table();
    std::fs::write(dir.join("table.md"), &table)?;
    println!("\n{table}");
    chart::draw_comparison(
        comparison,
        &dir.join("comparison.svg"),
        &dir.join("comparison.png"),
    )?;
    let mut written = "comparison.json,table.md,comparison.svg,comparison.png".to_owned();
    if comparison.servers.iter().any(|s| s.summary.has_classes()) {
        chart::draw_comparison_by_class(
            comparison,
            &dir.join("ttft_by_class.svg"),
            &dir.join("ttft_by_class.png"),
        )?;
        written.push_str(",ttft_by_class.svg,ttft_by_class.png");
    }
    eprintln!(
        "wrote {}/{{{written}}} and one folder per server",
        dir.display()
    );
    Ok(())
}
