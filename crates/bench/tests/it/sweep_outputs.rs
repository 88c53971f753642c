//! `bench sweep` against the mock: summary JSON, table, per-run results and both charts.

use crate::common;

use common::mock_server::MockServer;
use common::{read_json, sweep_args, write_jsonl};

#[test]
fn sweep_writes_summary_json_table_runs_and_both_charts() {
    let server = MockServer::with_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("prompts.jsonl");
    write_jsonl(&dataset, &vec!["ttft=20 itl=5 n=4".to_owned(); 4]);
    let out = dir.path().join("sweep");
    let args = sweep_args(&[
        "--base-url",
        &server.base_url,
        "--dataset",
        "jsonl",
        "--dataset-path",
        dataset.to_str().unwrap(),
        "--num-prompts",
        "4",
        "--concurrency",
        "1,2,4",
        "--runs",
        "2",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    tokenmill_bench::run_sweep(args).expect("the sweep completes");

    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["axis"], "concurrency");
    assert_eq!(summary["runs_per_level"], 2);
    let levels = summary["levels"].as_array().unwrap();
    assert_eq!(
        levels
            .iter()
            .map(|l| l["level"].as_f64().unwrap())
            .collect::<Vec<_>>(),
        vec![1.0, 2.0, 4.0]
    );
    for level in levels {
        let throughput = &level["metrics"]["output_throughput"];
        let (min, median, max) = (
            throughput["min"].as_f64().unwrap(),
            throughput["median"].as_f64().unwrap(),
            throughput["max"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= median && median <= max, "{throughput}");
        assert_eq!(level["metrics"]["completed"]["min"], 4.0);
        assert!(level["metrics"]["p99_itl_ms"]["median"].as_f64().unwrap() > 0.0);
    }
    // Peak concurrency follows the level.
    assert_eq!(levels[2]["metrics"]["max_concurrent_requests"]["max"], 4.0);

    for run in [
        "concurrency-1-run1",
        "concurrency-1-run2",
        "concurrency-4-run2",
    ] {
        assert_eq!(
            read_json(&out.join("runs").join(format!("{run}.json")))["completed"],
            4
        );
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(
        table.contains("| Users at the same time |") && table.contains("| 4 |"),
        "{table}"
    );

    let png = common::assert_chart(
        &out,
        "sweep",
        &[
            "Server throughput",
            "Output tokens per second",
            "Time to first token (TTFT)",
            "Users at the same time",
        ],
    );
    assert!(
        !out.join("ttft_by_class.svg").exists(),
        "one prompt class, no class chart"
    );
    // Width and height sit in the IHDR chunk.
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 1600);
}

#[test]
fn a_mixed_sweep_summarises_each_class_and_charts_its_ttft() {
    let server = MockServer::with_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let args = sweep_args(&[
        "--base-url",
        &server.base_url,
        "--dataset",
        "mixed",
        "--num-prompts",
        "3",
        "--input-len",
        "4",
        "--long-input-len",
        "40",
        "--output-len",
        "2",
        "--burstiness",
        "inf",
        "--request-rates",
        "20,40",
        "--runs",
        "2",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    tokenmill_bench::run_sweep(args).expect("the sweep completes");

    let summary = read_json(&out.join("summary.json"));
    for level in summary["levels"].as_array().unwrap() {
        let metrics = &level["metrics"];
        for key in [
            "ttft_by_class.short.median_ms",
            "ttft_by_class.short.p99_ms",
            "ttft_by_class.short.max_ms",
            "ttft_by_class.long.median_ms",
            "e2el_by_class.long.max_ms",
        ] {
            let spread = &metrics[key];
            assert!(spread["min"].as_f64().unwrap() > 0.0, "{key}: {spread}");
            assert!(spread["min"].as_f64() <= spread["max"].as_f64(), "{key}");
        }
        assert_eq!(metrics["ttft_by_class.short.requests"]["min"], 2.0);
        assert_eq!(metrics["ttft_by_class.long.requests"]["max"], 1.0);
    }
    let run = read_json(&out.join("runs").join("rate-20-run1.json"));
    assert_eq!(run["ttft_by_class"]["long"]["completed"], 1);
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(
        table.contains("| Short median TTFT (ms) |") && table.contains("| 40 |"),
        "{table}"
    );
    common::assert_chart(
        &out,
        "ttft_by_class",
        &[
            "Time to first token by prompt length",
            "Short prompts: median TTFT",
            "Long prompts: median TTFT",
            "Requests per second",
        ],
    );
}

#[test]
fn sweep_needs_exactly_one_axis() {
    let dir = tempfile::tempdir().unwrap();
    let args = sweep_args(&[
        "--base-url",
        "http://127.0.0.1:9",
        "--output-dir",
        dir.path().to_str().unwrap(),
    ]);
    let error = tokenmill_bench::run_sweep(args).unwrap_err();
    assert!(error.to_string().contains("--concurrency"), "{error}");
}

#[test]
fn zero_runs_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let args = sweep_args(&[
        "--concurrency",
        "1",
        "--runs",
        "0",
        "--output-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(tokenmill_bench::run_sweep(args).is_err());
}
