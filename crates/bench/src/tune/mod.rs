//! `tune`: starts the server once per configuration, runs `bench serve` against it, and
//! reports the configuration with the highest goodput under the objectives.

pub mod chart;
pub mod pareto_frontier;
pub mod report;
pub mod search;
pub mod slos;
pub mod space;
pub mod trial;

use std::collections::BTreeMap;
use std::path::Path;

use crate::args::{CommonArgs, TuneArgs};
use crate::prepared_benchmark::{Load, PreparedBenchmark};
use crate::report::serve_report;
use crate::spawn::{self, Interrupted, StopSignals};
use crate::tune::report::TuneReport;
use crate::tune::slos::TuneSlos;
use crate::tune::space::{server_command, Point, TuneSpace};
use crate::tune::trial::{Measurement, TuneTrial};

/// Everything fixed before the first server starts.
struct TunePlan<'a> {
    args: &'a TuneArgs,
    template: &'a str,
    space: TuneSpace,
    slos: TuneSlos,
}

impl<'a> TunePlan<'a> {
    fn new(args: &'a TuneArgs) -> anyhow::Result<Self> {
        let common = &args.common;
        let template = common.spawn.as_deref().ok_or_else(|| {
            anyhow::anyhow!(
                "tune needs --spawn \"CMD\": the server command, to which each configuration's \
                 flags are appended (or which has {{flags}} where they go)"
            )
        })?;
        if !common.goodput.is_empty() {
            anyhow::bail!(
                "tune takes its objectives from --ttft-p99-ms, --tpot-p99-ms and --itl-p99-ms, not --goodput"
            );
        }
        if common.spawn_log.is_some() {
            anyhow::bail!("tune writes each server's log to --output-dir/logs; drop --spawn-log");
        }
        Ok(TunePlan {
            args,
            template,
            space: TuneSpace::from_args(args)?,
            slos: TuneSlos::from_args(args)?,
        })
    }

    /// The `bench serve` options for one configuration's run.
    fn common_for(&self, trial: &TuneTrial) -> CommonArgs {
        let mut common = self.args.common.clone();
        common.spawn = Some(trial.command.clone());
        common.spawn_log = Some(self.logs_dir().join(format!("{}.log", trial.name)));
        // Every objective is a P99, whatever percentiles the table shows.
        if !common.percentiles.contains(&99.0) {
            common.percentiles.push(99.0);
        }
        common
    }

    fn trial(&self, point: &Point) -> TuneTrial {
        let flags = self.space.flags(point);
        TuneTrial {
            name: self.space.name(point),
            settings: self
                .space
                .settings(point)
                .into_iter()
                .map(|(flag, value)| (flag.to_owned(), value))
                .collect(),
            command: server_command(self.template, &flags),
            flags,
            measurement: None,
            error: None,
        }
    }

    fn logs_dir(&self) -> std::path::PathBuf {
        self.args.output_dir.join("logs")
    }

    fn runs_dir(&self) -> std::path::PathBuf {
        self.args.output_dir.join("runs")
    }
}

/// Runs the search, then writes tune.json, tune.md, tune.svg and tune.png and prints the
/// best configuration. A configuration whose server fails to start or whose run fails is
/// recorded with its error and the search goes on; a stop signal ends the whole tune.
pub async fn tune(args: &TuneArgs) -> anyhow::Result<TuneReport> {
    let plan = TunePlan::new(args)?;
    for dir in [plan.logs_dir(), plan.runs_dir()] {
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    let grid_size = plan.space.grid().len();
    let mut signals = StopSignals::listen();
    let mut scores = BTreeMap::new();
    let mut trials: Vec<(Point, TuneTrial)> = Vec::new();
    loop {
        let batch = args.search.next(&plan.space, &scores);
        if batch.is_empty() {
            break;
        }
        for point in batch {
            eprintln!(
                "== configuration {} ({} of at most {grid_size})",
                plan.space.flags(&point),
                trials.len() + 1
            );
            let trial = run_trial(&plan, &point, &mut signals).await?;
            scores.insert(point.clone(), trial.score());
            trials.push((point, trial));
            // A long tune stopped midway keeps what it measured.
            let so_far = TuneReport::new(plan.slos.clone(), args.search, grid_size, trials.clone());
            serve_report::save_json(
                &serde_json::to_value(&so_far)?,
                &args.output_dir.join("tune.json"),
            )?;
        }
    }
    let report = TuneReport::new(plan.slos, args.search, grid_size, trials);
    write_outputs(&report, &args.output_dir)?;
    println!("{}", report.best_line());
    Ok(report)
}

/// Starts the configuration's server, runs the workload, stops the server.
async fn run_trial(
    plan: &TunePlan<'_>,
    point: &Point,
    signals: &mut StopSignals,
) -> anyhow::Result<TuneTrial> {
    let mut trial = plan.trial(point);
    let common = plan.common_for(&trial);
    let outcome = spawn::while_serving_listening(&common, signals, async {
        let prepared = PreparedBenchmark::new(&common).await?;
        let load = Load {
            max_concurrency: common.max_concurrency,
            request_rate: common.request_rate,
            arrival_seed: common.seed,
        };
        prepared.run(load, &trial.name).await
    })
    .await;
    match outcome {
        Ok(result) => {
            let json = serve_report::to_json(&result);
            serve_report::save_json(&json, &plan.runs_dir().join(format!("{}.json", trial.name)))?;
            let measurement = Measurement::of(&result, &plan.slos);
            eprintln!(
                "{}: goodput {:.2} req/s, {:.1} output tok/s, P99 TTFT {:.1} ms, P99 TPOT {:.1} ms, P99 ITL {:.1} ms{}",
                trial.name,
                measurement.goodput,
                measurement.output_throughput,
                measurement.ttft_p99_ms,
                measurement.tpot_p99_ms,
                measurement.itl_p99_ms,
                if measurement.meets_every_slo { "" } else { " (misses an objective)" }
            );
            trial.measurement = Some(measurement);
        }
        Err(error) if error.is::<Interrupted>() => return Err(error),
        Err(error) => {
            eprintln!("{}: failed: {error:#}", trial.name);
            trial.error = Some(format!("{error:#}"));
        }
    }
    Ok(trial)
}

fn write_outputs(report: &TuneReport, dir: &Path) -> anyhow::Result<()> {
    serve_report::save_json(&serde_json::to_value(report)?, &dir.join("tune.json"))?;
    let table = report.markdown_table();
    std::fs::write(dir.join("tune.md"), &table)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.join("tune.md").display()))?;
    println!("\n{table}");
    crate::tune::chart::draw(report, &dir.join("tune.svg"), &dir.join("tune.png"))?;
    eprintln!(
        "wrote {}/{{tune.json,tune.md,tune.svg,tune.png,runs/,logs/}}",
        dir.display()
    );
    Ok(())
}
