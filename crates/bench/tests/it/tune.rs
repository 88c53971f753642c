//! `tune` end to end against a mock server whose speed follows the flags it was started
//! with: the mock is this test binary, re-run with only `serve_as_the_spawned_mock`.

use crate::common;

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use common::mock_server::{MockOptions, MockServer, Pacing};
use common::{read_json, write_jsonl};
use tokenmill_bench::TuneArgs;

const ADDRESS_ENV: &str = "TOKENMILL_TUNE_MOCK_ADDRESS";
const FLAGS_ENV: &str = "TOKENMILL_TUNE_MOCK_FLAGS";

#[derive(Parser)]
struct TuneCli {
    #[command(flatten)]
    args: TuneArgs,
}

fn tune_args(words: &[&str]) -> TuneArgs {
    let argv = std::iter::once("tune").chain(words.iter().copied());
    TuneCli::try_parse_from(argv)
        .expect("test arguments parse")
        .args
}

/// The scripted server: a bigger token budget shortens TTFT (fewer prefill steps) and the
/// decode gaps, but one gap in ten stalls behind a prefill chunk that grows with the budget;
/// `--max-num-seqs` replies stream at once, each sequence adding 2 ms to every gap, and the
/// rest queue.
///
/// | budget | TTFT | gap | stall |
/// |---:|---:|---:|---:|
/// | 64 | 200 ms | 5 ms | 5 ms |
/// | 256 | 50 ms | 6 ms | 35 ms |
/// | 1024 | 10 ms | 0 ms | 90 ms |
fn pacing_for(flags: &str) -> Pacing {
    let words: Vec<&str> = flags.split_whitespace().collect();
    let flag = |name: &str| {
        words
            .windows(2)
            .find(|pair| pair[0] == name)
            .and_then(|pair| pair[1].parse::<u64>().ok())
            .unwrap_or_else(|| panic!("the mock needs {name}, got {flags:?}"))
    };
    let (ttft, gap, stall) = match flag("--max-num-batched-tokens") {
        64 => (200, 5, 5),
        256 => (50, 6, 35),
        1024 => (10, 0, 90),
        other => panic!("the mock has no timing for a budget of {other}"),
    };
    let seqs = flag("--max-num-seqs");
    let ms = Duration::from_millis;
    let mut gaps = vec![ms(gap + 2 * seqs); 9];
    gaps.push(ms(stall + 2 * seqs));
    Pacing {
        ttft: ms(ttft),
        gaps,
        slots: seqs as usize,
    }
}

/// The server `tune` spawns; only ever run that way, with its address and flags in the
/// environment.
#[test]
#[ignore = "run by the tune test as its spawned server"]
fn serve_as_the_spawned_mock() {
    let address = std::env::var(ADDRESS_ENV).expect("started by the tune test");
    let flags = std::env::var(FLAGS_ENV).unwrap_or_default();
    let _server = MockServer::start_on(
        &address,
        MockOptions {
            tokenizer: true,
            pacing: Some(pacing_for(&flags)),
            ..Default::default()
        },
    );
    loop {
        std::thread::park();
    }
}

/// A free local port: the kernel picks it, the listener closes, the spawned mock takes it.
fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// The command `tune` starts per configuration, its flags in place of `{flags}`.
fn mock_server_template(address: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let test = common::libtest_name(module_path!(), "serve_as_the_spawned_mock");
    format!(
        "{ADDRESS_ENV}={address} {FLAGS_ENV}='{{flags}}' exec {} --exact {test} --ignored --nocapture",
        exe.display()
    )
}

fn names(list: &serde_json::Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

fn configuration<'a>(tune: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    tune["configurations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} was not run"))
}

const STEADY: &str = "max-num-batched-tokens-256_max-num-seqs-8";
const FASTEST: &str = "max-num-batched-tokens-1024_max-num-seqs-8";
const SLOW_START: &str = "max-num-batched-tokens-64_max-num-seqs-8";

#[test]
fn tune_picks_the_highest_goodput_that_meets_every_objective_not_the_highest_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("prompts.jsonl");
    write_jsonl(&dataset, &vec!["hello".to_owned(); 16]);
    let out = dir.path().join("tune");
    let address = free_address();
    let base_url = format!("http://{address}");
    let template = mock_server_template(&address);
    tokenmill_bench::run_tune(tune_args(&[
        "--base-url",
        &base_url,
        "--spawn",
        &template,
        "--dataset",
        "jsonl",
        "--dataset-path",
        dataset.to_str().unwrap(),
        "--num-prompts",
        "16",
        "--output-len",
        "20",
        "--max-concurrency",
        "8",
        "--no-progress-bar",
        "--itl-p99-ms",
        "65",
        "--ttft-p99-ms",
        "1100",
        "--max-num-batched-tokens",
        "64,256,1024",
        "--max-num-seqs",
        "2,8",
        "--output-dir",
        out.to_str().unwrap(),
    ]))
    .expect("the tune completes");

    let tune = read_json(&out.join("tune.json"));
    // Three budgets by two limits; on so small a space the climb ends up trying them all.
    assert_eq!(tune["grid_size"], 6);
    assert_eq!(tune["configurations_run"], 6);
    let mut run: Vec<&str> = tune["configurations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    run.sort();
    run.dedup();
    assert_eq!(run.len(), 6, "every configuration once: {run:?}");
    for name in &run {
        let c = configuration(&tune, name);
        assert!(c["error"].is_null(), "{name}: {}", c["error"]);
        for number in [
            "ttft_p99_ms",
            "tpot_p99_ms",
            "itl_p99_ms",
            "output_throughput",
            "goodput",
        ] {
            assert!(c["measurement"][number].is_f64(), "{name} lacks {number}");
        }
        assert!(out.join("runs").join(format!("{name}.json")).exists());
        assert!(out.join("logs").join(format!("{name}.log")).exists());
    }

    // A person reading the numbers: the 1024-token budget streams fastest but stalls 90 ms
    // behind prefill, past the 65 ms ITL objective; 64 tokens keeps ITL low but starts slowly,
    // and with two sequences at once queues the rest past the TTFT objective.
    let fastest = &configuration(&tune, FASTEST)["measurement"];
    let steady = &configuration(&tune, STEADY)["measurement"];
    assert_eq!(fastest["met"]["itl"], false);
    assert_eq!(fastest["meets_every_slo"], false);
    assert_eq!(fastest["goodput"], 0.0, "no request met the ITL objective");
    assert!(
        fastest["output_throughput"].as_f64() > steady["output_throughput"].as_f64(),
        "the mock should make {FASTEST} the fastest: {fastest} vs {steady}"
    );
    assert_eq!(steady["meets_every_slo"], true);
    let slow_queue =
        &configuration(&tune, "max-num-batched-tokens-64_max-num-seqs-2")["measurement"];
    assert_eq!(slow_queue["met"]["ttft"], false);
    assert_eq!(tune["best"], STEADY);

    // Two sequences at a time give the lowest ITL at 64 tokens; at 256 and 1024 tokens they
    // are beaten on both counts (by 64 tokens with 8 sequences, and by 256 with 8).
    assert_eq!(
        names(&tune["pareto"]["itl"]),
        [
            "max-num-batched-tokens-64_max-num-seqs-2",
            SLOW_START,
            STEADY,
            FASTEST
        ]
    );
    assert_eq!(names(&tune["pareto"]["ttft"]), [FASTEST]);

    let table = std::fs::read_to_string(out.join("tune.md")).unwrap();
    assert!(
        table.contains("| `--max-num-batched-tokens 256 --max-num-seqs 8` **best** |"),
        "{table}"
    );
    assert_chart(&out);
}

fn assert_chart(out: &Path) {
    common::assert_chart(
        out,
        "tune",
        &[
            "Output throughput against P99 ITL",
            "Pareto frontier",
            "objective: P99 ITL ≤ 65 ms",
        ],
    );
}

#[test]
fn tune_without_an_objective_or_a_server_command_says_which_flag_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let no_objective = tune_args(&["--spawn", "true", "--output-dir", out]);
    let error = tokenmill_bench::run_tune(no_objective).unwrap_err();
    assert!(error.to_string().contains("--itl-p99-ms"), "{error}");
    let no_command = tune_args(&["--itl-p99-ms", "30", "--output-dir", out]);
    let error = tokenmill_bench::run_tune(no_command).unwrap_err();
    assert!(error.to_string().contains("--spawn"), "{error}");
}

#[test]
fn a_configuration_whose_server_exits_is_recorded_and_the_search_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tune");
    let ready = dir.path().join("ready");
    let mock = MockServer::start(MockOptions {
        tokenizer: true,
        healthy_once_exists: Some(ready.clone()),
        ..Default::default()
    });
    // The 8-sequence server exits at once; the 4-sequence one makes the mock healthy until
    // it is stopped, so the next server is not seen healthy before it has started.
    let ready = ready.display();
    let template = format!(
        "case '{{flags}}' in *'max-num-seqs 8'*) exit 3;; esac; \
         touch {ready}; trap 'rm -f {ready}; exit 0' TERM; sleep 300 & wait"
    );
    tokenmill_bench::run_tune(tune_args(&[
        "--base-url",
        &mock.base_url,
        "--spawn",
        &template,
        "--dataset",
        "jsonl",
        "--dataset-path",
        write_prompts(dir.path()).to_str().unwrap(),
        "--num-prompts",
        "2",
        "--no-progress-bar",
        "--itl-p99-ms",
        "1000",
        "--max-num-batched-tokens",
        "64",
        "--max-num-seqs",
        "4,8",
        "--search",
        "grid",
        "--output-dir",
        out.to_str().unwrap(),
    ]))
    .expect("the tune completes");
    let tune = read_json(&out.join("tune.json"));
    let broken = configuration(&tune, "max-num-batched-tokens-64_max-num-seqs-8");
    assert!(broken["measurement"].is_null());
    assert!(
        broken["error"].as_str().unwrap().contains("exited"),
        "{broken}"
    );
    assert_eq!(tune["best"], "max-num-batched-tokens-64_max-num-seqs-4");
}

fn write_prompts(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("prompts.jsonl");
    write_jsonl(&path, &vec!["ttft=5 itl=2 n=4".to_owned(); 2]);
    path
}
