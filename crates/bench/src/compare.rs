//! `bench compare`: the same sweep against several servers, started one after the other on
//! one address, written as one table and one chart.

use std::collections::HashSet;
use std::path::Path;

use crate::args::CompareArgs;
use crate::comparison::{Comparison, ServerSweep};
use crate::report;
use crate::sweep;

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
        let summary = sweep::sweep(&args.sweep_for(server)).await?;
        sweeps.push(ServerSweep {
            name: server.name.clone(),
            summary,
        });
    }
    let comparison = Comparison::new(sweeps)?;
    write_outputs(&comparison, &args.output_dir)?;
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

fn write_outputs(comparison: &Comparison, dir: &Path) -> anyhow::Result<()> {
    report::save_json(
        &serde_json::to_value(comparison)?,
        &dir.join("comparison.json"),
    )?;
    let table = comparison.markdown_table();
    std::fs::write(dir.join("table.md"), &table)?;
    println!("\n{table}");
    crate::chart::draw_comparison(
        comparison,
        &dir.join("comparison.svg"),
        &dir.join("comparison.png"),
    )?;
    let mut written = "comparison.json,table.md,comparison.svg,comparison.png".to_owned();
    if comparison.servers.iter().any(|s| s.summary.has_classes()) {
        crate::chart::draw_comparison_by_class(
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
