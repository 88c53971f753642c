//! `bench sweep`: serve runs repeated at every load level, summarised into JSON, a table and charts.

use std::path::Path;

use crate::args::SweepArgs;
use crate::prepared_benchmark::{Load, PreparedBenchmark};
use crate::report;
use crate::request_rate::RequestRate;
use crate::spawn;
use crate::sweep_summary::{LevelSummary, SweepAxis, SweepSummary};

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
        let json = report::to_json(&result);
        report::save_json(
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
fn class_ttfts(result: &crate::benchmark_result::BenchmarkResult) -> String {
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
    report::save_json(&serde_json::to_value(summary)?, &dir.join("summary.json"))?;
    let table = summary.markdown_table();
    std::fs::write(dir.join("table.md"), &table)?;
    println!("\n{table}");
    crate::chart::draw(summary, &dir.join("sweep.svg"), &dir.join("sweep.png"))?;
    let mut written = "summary.json,table.md,sweep.svg,sweep.png,runs/".to_owned();
    if summary.has_classes() {
        crate::chart::draw_by_class(
            summary,
            &dir.join("ttft_by_class.svg"),
            &dir.join("ttft_by_class.png"),
        )?;
        written.push_str(",ttft_by_class.svg,ttft_by_class.png");
    }
    eprintln!("wrote {}/{{{written}}}", dir.display());
    Ok(())
}
