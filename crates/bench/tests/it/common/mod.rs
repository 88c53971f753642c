//! Helpers shared by the integration tests: the scripted mock server, the stand-in for a
//! spawned server, and argument parsing.

#![allow(dead_code)]

pub mod mock_server;
pub mod spawned_process;

use std::path::Path;

use clap::Parser;
use tokenmill_bench::{BenchServeArgs, SweepArgs};

#[derive(Parser)]
struct ServeCli {
    #[command(flatten)]
    args: BenchServeArgs,
}

#[derive(Parser)]
struct SweepCli {
    #[command(flatten)]
    args: SweepArgs,
}

/// `bench serve` options as a user would type them.
pub fn serve_args(words: &[&str]) -> BenchServeArgs {
    let argv = std::iter::once("bench").chain(words.iter().copied());
    ServeCli::try_parse_from(argv)
        .expect("test arguments parse")
        .args
}

pub fn sweep_args(words: &[&str]) -> SweepArgs {
    let argv = std::iter::once("bench").chain(words.iter().copied());
    SweepCli::try_parse_from(argv)
        .expect("test arguments parse")
        .args
}

/// Writes one prompt per line.
pub fn write_jsonl(path: &Path, prompts: &[String]) {
    let lines: Vec<String> = prompts
        .iter()
        .map(|p| serde_json::json!({ "prompt": p }).to_string())
        .collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

/// `bench serve` with `words`, its result saved as `dir/result.json` and returned.
pub fn serve_result(dir: &Path, words: &[&str]) -> serde_json::Value {
    let result = dir.join("result.json");
    let mut words = words.to_vec();
    words.extend(["--save-result", result.to_str().unwrap()]);
    tokenmill_bench::run_serve(serve_args(&words)).expect("the run completes");
    read_json(&result)
}

/// The chart `out/<name>.svg` names each of `texts`, and `out/<name>.png` is a PNG, whose
/// bytes are returned.
pub fn assert_chart(out: &Path, name: &str, texts: &[&str]) -> Vec<u8> {
    let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
    assert!(svg.starts_with("<svg"), "{name}.svg is not an SVG");
    for text in texts {
        assert!(svg.contains(text), "{name}.svg lacks {text:?}");
    }
    let png = std::fs::read(out.join(format!("{name}.png"))).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}.png is not a PNG");
    png
}

pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Asserts `actual` is within `tolerance` of `expected`, naming the field on failure.
pub fn assert_near(field: &str, actual: f64, expected: f64, tolerance: f64) {
    assert!(
        (actual - expected).abs() <= tolerance,
        "{field}: got {actual}, expected {expected} ± {tolerance}"
    );
}

/// A test's full name as libtest filters it in this binary, for a test that runs one test of
/// its own binary as a child process: `libtest_name(module_path!(), "f")` is `module::f`
/// (`module_path!()` starts with the binary's crate name, which libtest leaves out).
pub fn libtest_name(module_path: &str, test: &str) -> String {
    let module = module_path.split_once("::").map_or("", |(_, rest)| rest);
    format!("{module}::{test}")
}
