//! `bench compare` against the mock playing two servers in turn: one table with both and their
//! ratios, one chart with both, and each server's own sweep outputs.

use crate::common;

use std::path::Path;

use clap::Parser;
use common::mock_server::{MockOptions, MockServer};
use common::{read_json, write_jsonl};
use tokenmill_bench::CompareArgs;

#[derive(Parser)]
struct CompareCli {
    #[command(flatten)]
    args: CompareArgs,
}

fn compare_args(words: &[&str]) -> CompareArgs {
    let argv = std::iter::once("bench").chain(words.iter().copied());
    CompareCli::try_parse_from(argv)
        .expect("test arguments parse")
        .args
}

/// A stand-in server: it sets the mock's slowdown (which also makes the mock healthy) and,
/// when stopped, removes it again, so the next server is not seen healthy before it has
/// set its own. The rename makes the number appear whole.
fn server_slowed_by(factor: u32, slowdown_file: &Path) -> String {
    let file = slowdown_file.display();
    format!(
        "echo {factor} > {file}.tmp && mv {file}.tmp {file}; \
         trap 'rm -f {file}; exit 0' TERM; sleep 300 & wait"
    )
}

fn median(summary: &serde_json::Value, level: usize, metric: &str) -> f64 {
    summary["levels"][level]["metrics"][metric]["median"]
        .as_f64()
        .unwrap_or_else(|| panic!("no {metric} at level {level}"))
}

#[test]
fn compare_writes_one_table_and_one_chart_with_every_server() {
    let dir = tempfile::tempdir().unwrap();
    let slowdown = dir.path().join("slowdown");
    let server = MockServer::start(MockOptions {
        tokenizer: true,
        healthy_once_exists: Some(slowdown.clone()),
        slowdown_file: Some(slowdown.clone()),
        ..Default::default()
    });
    let dataset = dir.path().join("prompts.jsonl");
    write_jsonl(&dataset, &vec!["ttft=20 itl=5 n=4".to_owned(); 4]);
    let out = dir.path().join("compare");
    let (fast, slow) = (
        format!("fast={}", server_slowed_by(1, &slowdown)),
        format!("slow={}", server_slowed_by(4, &slowdown)),
    );
    let args = compare_args(&[
        "--base-url",
        &server.base_url,
        "--dataset",
        "jsonl",
        "--dataset-path",
        dataset.to_str().unwrap(),
        "--num-prompts",
        "4",
        "--concurrency",
        "1,2",
        "--runs",
        "1",
        "--server",
        &fast,
        "--server",
        &slow,
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    tokenmill_bench::run_compare(args).expect("the comparison completes");

    let comparison = read_json(&out.join("comparison.json"));
    let servers = comparison["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert_eq!(
        (servers[0]["name"].as_str(), servers[1]["name"].as_str()),
        (Some("fast"), Some("slow"))
    );
    let (fast, slow) = (&servers[0]["summary"], &servers[1]["summary"]);
    // The mock stretches the slow server's delays four times; client overhead only narrows that.
    for metric in ["median_ttft_ms", "median_tpot_ms"] {
        let (f, s) = (median(fast, 0, metric), median(slow, 0, metric));
        assert!(s > 2.0 * f, "{metric}: slow {s} is not well above fast {f}");
    }
    assert!(median(slow, 1, "output_throughput") < median(fast, 1, "output_throughput"));

    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(
        table.starts_with("| Users at the same time | Metric | fast | slow | slow / fast |"),
        "{table}"
    );
    for (level, heading, metric) in [
        (0, "Median TTFT (ms)", "median_ttft_ms"),
        (1, "Output tokens per second", "output_throughput"),
    ] {
        let (f, s) = (median(fast, level, metric), median(slow, level, metric));
        let users = level + 1;
        let row = format!("| {users} | {heading} | {f:.1} | {s:.1} | {:.2}× |", s / f);
        assert!(table.contains(&row), "missing {row:?} in\n{table}");
    }

    common::assert_chart(
        &out,
        "comparison",
        &[
            "fast vs slow",
            "Server throughput",
            "fast: time to first token (TTFT)",
            "slow: time per output token (TPOT)",
        ],
    );

    for name in ["fast", "slow"] {
        let own = out.join(name);
        for file in [
            "summary.json",
            "table.md",
            "sweep.svg",
            "sweep.png",
            "server.log",
        ] {
            assert!(own.join(file).is_file(), "{name} lacks {file}");
        }
        assert_eq!(
            read_json(&own.join("runs").join("concurrency-2-run1.json"))["completed"],
            4
        );
    }
}

#[test]
fn two_servers_with_one_name_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let command = format!("a=touch {}", marker.display());
    let args = compare_args(&[
        "--base-url",
        "http://127.0.0.1:9",
        "--concurrency",
        "1",
        "--server",
        &command,
        "--server",
        &command,
        "--output-dir",
        dir.path().join("out").to_str().unwrap(),
    ]);
    let error = tokenmill_bench::run_compare(args).unwrap_err();
    assert!(error.to_string().contains("two servers"), "{error}");
    assert!(!marker.exists(), "a server was started");
}
