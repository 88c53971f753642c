//! Command-line options of `bench serve`, `bench sweep`, `bench compare` and `tune`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::load::endpoint::Endpoint;
use crate::load::request_rate::RequestRate;
use crate::named_server::NamedServer;
use crate::report::goodput::Slo;

/// Where the prompts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DatasetKind {
    /// Random token sequences of exact lengths (measured with the server's tokenizer).
    Random,
    /// A ShareGPT JSON file (`--dataset-path`).
    Sharegpt,
    /// One prompt per line: a JSON object with "prompt" or a plain string (`--dataset-path`).
    Jsonl,
    /// Random prompts, `--num-long-prompts` of them `--long-input-len` tokens long and sent
    /// first, the rest `--input-len` tokens long.
    Mixed,
    /// vLLM's `prefix_repetition`: `--num-prefixes` random prefixes of `--prefix-len` tokens
    /// (long system prompts), each followed by random questions of `--input-len` tokens; the
    /// prompts of all prefixes come shuffled, sent as text (what routers match prefixes on).
    PrefixRepetition,
    /// Input-grounded chat prompts whose replies copy from the prompt (rename a variable in
    /// a function, list the e-mails of a memo, fix a paragraph's typos, CSV to a Markdown
    /// table, JSON to YAML, replace a word), drawn from `--seed`; needs `--endpoint chat`.
    Grounded,
    /// Open-ended chat questions (stories, explanations, tips, poems) drawn from `--seed`,
    /// whose replies copy little from the prompt; needs `--endpoint chat`.
    OpenChat,
    /// Grounded and open-chat prompts in turn, grounded first; needs `--endpoint chat`.
    GroundedMix,
}

// An option value, so it sits with the options: its walk (`TuneSearch::next`, in
// `tune_search`) needs the space these options build, and naming it from here made a circle.
/// The search strategy of `tune`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TuneSearch {
    /// Every valid configuration.
    Grid,
    /// Every other value of each knob (ends included), then a climb through neighbours.
    CoarseToFine,
}

/// Options shared by `serve` and `sweep`: the server, the prompts and the load shape.
#[derive(Args, Clone, Debug)]
pub struct CommonArgs {
    /// Server root, without `/v1`.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub base_url: String,

    #[arg(long, value_enum, default_value_t = Endpoint::Completions)]
    pub endpoint: Endpoint,

    /// Sent as `Authorization: Bearer <key>` with every request, for a server started with
    /// `--api-key`; read from `OPENAI_API_KEY` when not given, as vLLM's benchmark does.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Model name sent in requests; default: the first model of `GET /v1/models`.
    #[arg(long)]
    pub model: Option<String>,

    #[arg(long, value_enum, default_value_t = DatasetKind::Random)]
    pub dataset: DatasetKind,

    /// Where prompts are tokenized (`POST /tokenize`) to fit their lengths, when not at
    /// `--base-url`: one replica behind a router that does not pass `/tokenize` on.
    #[arg(long)]
    pub tokenizer_base_url: Option<String>,

    /// File for the `sharegpt` and `jsonl` datasets.
    #[arg(long)]
    pub dataset_path: Option<PathBuf>,

    /// Random dataset: prompt tokens per request (after the shared prefix); for mixed, of the
    /// short prompts.
    #[arg(long, default_value_t = 1024)]
    pub input_len: usize,

    /// Mixed dataset: how many of `--num-prompts` are long; they are sent first, all at once.
    #[arg(long, default_value_t = 1)]
    pub num_long_prompts: usize,

    /// Mixed dataset: prompt tokens of each long prompt (after the shared prefix).
    #[arg(long, default_value_t = 8000)]
    pub long_input_len: usize,

    /// Mixed dataset: seconds between the long prompts' send and the first short one's; the
    /// short ones then follow at `--request-rate`'s gaps.
    #[arg(long, default_value_t = 0.0)]
    pub long_lead: f64,

    /// Prompts of at least this many tokens (as the server counted them) are reported as
    /// "long", the rest as "short"; default: `--long-input-len` for mixed, else 1024.
    #[arg(long)]
    pub long_prompt_threshold: Option<usize>,

    /// Tokens to generate per request; default 128 for random and jsonl, 256 for grounded,
    /// open-chat and grounded-mix, the reference reply's length for sharegpt.
    #[arg(long)]
    pub output_len: Option<usize>,

    /// Random dataset: lengths are drawn uniformly in [len*(1-r), len*(1+r)].
    #[arg(long, default_value_t = 0.0)]
    pub range_ratio: f64,

    /// Random dataset: tokens of a prefix shared by every prompt (prefix-repetition: by
    /// every prompt of one prefix).
    #[arg(long, default_value_t = 0)]
    pub prefix_len: usize,

    /// Prefix-repetition dataset: how many different prefixes the prompts share out, in
    /// turn (`--num-prompts 48 --num-prefixes 12`: 4 prompts per prefix).
    #[arg(long, default_value_t = 10)]
    pub num_prefixes: usize,

    #[arg(long, default_value_t = 1000)]
    pub num_prompts: usize,

    /// Most requests in flight at once; unlimited when absent.
    #[arg(long)]
    pub max_concurrency: Option<usize>,

    /// Requests per second ("inf" sends all at once).
    #[arg(long, default_value = "inf")]
    pub request_rate: RequestRate,

    /// Gamma shape of the arrival gaps: 1 is Poisson, below 1 burstier, above 1 steadier;
    /// "inf" makes every gap exactly 1 / rate.
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,

    /// Requests sent and discarded before measuring.
    #[arg(long, default_value_t = 0)]
    pub num_warmups: usize,

    /// Ask the server to keep generating past end-of-sequence.
    #[arg(long)]
    pub ignore_eos: bool,

    /// A JSON object whose keys are added to every request body, e.g. a `response_format` to
    /// measure structured output (`'{"response_format": {"type": "json_object"}}'`).
    #[arg(long, value_parser = parse_json_object)]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,

    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Percentiles reported for every latency metric.
    #[arg(long, value_delimiter = ',', default_value = "99")]
    pub percentiles: Vec<f64>,

    /// Service-level objectives in ms, e.g. `--goodput ttft:500 tpot:50`.
    #[arg(long, num_args = 1..)]
    pub goodput: Vec<Slo>,

    /// Seconds allowed per request before it counts as failed.
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,

    /// Start the server under test with `sh -c CMD`, wait for `GET /health`, stop it afterwards.
    #[arg(long)]
    pub spawn: Option<String>,

    /// Seconds to wait for the spawned server to become healthy.
    #[arg(long, default_value_t = 600)]
    pub spawn_timeout: u64,

    /// File receiving the spawned server's stdout and stderr (default: this terminal).
    #[arg(long)]
    pub spawn_log: Option<PathBuf>,

    /// Print plain progress lines even on a terminal.
    #[arg(long)]
    pub no_progress_bar: bool,
}

/// `bench serve`: one benchmark run.
#[derive(Args, Clone, Debug)]
pub struct BenchServeArgs {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Write the result as JSON (vllm bench serve's field names).
    #[arg(long)]
    pub save_result: Option<PathBuf>,

    /// Write every request's prompt and generated text as JSON lines, in dataset order
    /// (`{"index", "prompt", "text", "output_tokens", "error"}`), to compare the replies of
    /// two servers or configurations.
    #[arg(long)]
    pub save_responses: Option<PathBuf>,
}

/// `bench sweep`: serve runs repeated over load levels.
#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Concurrency levels (users at the same time); each sets `--max-concurrency`.
    #[arg(long, value_delimiter = ',', conflicts_with = "request_rates")]
    pub concurrency: Vec<usize>,

    /// Request rates (req/s); each sets `--request-rate`.
    #[arg(long, value_delimiter = ',')]
    pub request_rates: Vec<f64>,

    /// Runs per level; the summary keeps their min, median and max.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,

    /// Receives summary.json, sweep.svg, sweep.png and runs/*.json.
    #[arg(long, default_value = "bench-sweep")]
    pub output_dir: PathBuf,
}

/// `bench compare`: the same sweep against several servers, one after the other, on one address.
#[derive(Args, Clone, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub common: CommonArgs,

    /// A server to measure, as NAME=COMMAND; repeat for each. Each is started on --base-url in
    /// turn; ratios compare every later server with the first.
    #[arg(long = "server", required = true, conflicts_with_all = ["spawn", "spawn_log"])]
    pub servers: Vec<NamedServer>,

    /// Concurrency levels (users at the same time); each sets `--max-concurrency`.
    #[arg(long, value_delimiter = ',', conflicts_with = "request_rates")]
    pub concurrency: Vec<usize>,

    /// Request rates (req/s); each sets `--request-rate`.
    #[arg(long, value_delimiter = ',')]
    pub request_rates: Vec<f64>,

    /// Runs per level and server; the summaries keep their min, median and max.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,

    /// Receives comparison.json, table.md, comparison.svg, comparison.png and one folder per
    /// server with its own sweep outputs and server.log.
    #[arg(long, default_value = "bench-compare")]
    pub output_dir: PathBuf,
}

/// `tune`: one `bench serve` run per server configuration, searching for the highest goodput
/// under latency objectives.
#[derive(Args, Clone, Debug)]
pub struct TuneArgs {
    /// The workload, and in `--spawn` the server command: each configuration's flags replace
    /// `{flags}` in it, or are appended when it has none.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Objective: P99 time to first token, in ms.
    #[arg(long)]
    pub ttft_p99_ms: Option<f64>,

    /// Objective: P99 inter-token latency, in ms.
    #[arg(long)]
    pub itl_p99_ms: Option<f64>,

    /// Objective: P99 time per output token, in ms.
    #[arg(long)]
    pub tpot_p99_ms: Option<f64>,

    /// Token budgets per step to try.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "64,128,256,512,1024,2048"
    )]
    pub max_num_batched_tokens: Vec<usize>,

    /// Running-sequence limits to try.
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64,128")]
    pub max_num_seqs: Vec<usize>,

    /// Long-prefill thresholds to try; the server's default when absent.
    #[arg(long, value_delimiter = ',')]
    pub long_prefill_token_threshold: Vec<usize>,

    /// Inter-token-latency targets (ms) to try; the server's default when absent.
    #[arg(long, value_delimiter = ',')]
    pub target_itl_ms: Vec<f64>,

    /// `grid` runs every configuration; `coarse-to-fine` runs every other value of each knob,
    /// then climbs from the best one through its untried neighbours.
    #[arg(long, value_enum, default_value_t = TuneSearch::CoarseToFine)]
    pub search: TuneSearch,

    /// Receives tune.json, tune.md, tune.svg, tune.png, runs/*.json and logs/*.log.
    #[arg(long, default_value = "bench-tune")]
    pub output_dir: PathBuf,
}

/// Prompt-length threshold of the per-class report when `--long-prompt-threshold` is not
/// given and the dataset is not mixed.
pub const DEFAULT_LONG_PROMPT_THRESHOLD: usize = 1024;

impl CommonArgs {
    /// Tokens from which a prompt counts as long in the per-class report.
    pub fn prompt_class_threshold(&self) -> usize {
        match (self.long_prompt_threshold, self.dataset) {
            (Some(threshold), _) => threshold,
            (None, DatasetKind::Mixed) => self.long_input_len,
            (None, _) => DEFAULT_LONG_PROMPT_THRESHOLD,
        }
    }

    /// Requests sent first, all at once, ahead of the arrival schedule: the mixed dataset's
    /// long prompts.
    pub fn leading_requests(&self) -> usize {
        match self.dataset {
            DatasetKind::Mixed => self.num_long_prompts,
            _ => 0,
        }
    }
}

impl CompareArgs {
    /// The sweep that measures `server`: started with its command, logged and written to its
    /// own folder.
    pub fn sweep_for(&self, server: &NamedServer) -> SweepArgs {
        let output_dir = self.output_dir.join(&server.name);
        let mut common = self.common.clone();
        common.spawn = Some(server.command.clone());
        common.spawn_log = Some(output_dir.join("server.log"));
        SweepArgs {
            common,
            concurrency: self.concurrency.clone(),
            request_rates: self.request_rates.clone(),
            runs: self.runs,
            output_dir,
        }
    }
}

fn parse_json_object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("--extra-body must be a JSON object".into()),
        Err(e) => Err(format!("--extra-body is not JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Bench,
    }

    #[derive(Subcommand)]
    enum Bench {
        Serve(BenchServeArgs),
        Sweep(SweepArgs),
        Compare(CompareArgs),
        Tune(TuneArgs),
    }

    fn parse(words: &[&str]) -> Result<Bench, clap::Error> {
        Cli::try_parse_from(std::iter::once("tokenmill").chain(words.iter().copied()))
            .map(|cli| cli.command)
    }

    #[test]
    fn option_definitions_pass_clap_consistency_checks() {
        Cli::command().debug_assert();
    }

    #[test]
    fn goodput_takes_several_objectives_after_one_flag() {
        let Ok(Bench::Serve(args)) = parse(&[
            "serve",
            "--goodput",
            "ttft:500",
            "tpot:50",
            "--num-prompts",
            "3",
        ]) else {
            panic!("serve arguments should parse");
        };
        assert_eq!(args.common.goodput.len(), 2);
        assert_eq!(args.common.num_prompts, 3);
    }

    #[test]
    fn sweep_rejects_both_axes_at_once() {
        assert!(parse(&["sweep", "--concurrency", "1,2", "--request-rates", "1"]).is_err());
        let Ok(Bench::Sweep(args)) = parse(&["sweep", "--concurrency", "1,4,16"]) else {
            panic!("sweep arguments should parse");
        };
        assert_eq!(args.concurrency, vec![1, 4, 16]);
    }

    #[test]
    fn bad_values_are_rejected_by_the_parser() {
        assert!(parse(&["serve", "--request-rate", "fast"]).is_err());
        assert!(parse(&["serve", "--goodput", "latency:5"]).is_err());
        assert!(parse(&["serve", "--endpoint", "embeddings"]).is_err());
    }

    #[test]
    fn mixed_defaults_to_one_long_prompt_and_its_length_as_the_threshold() {
        let Ok(Bench::Serve(args)) = parse(&[
            "serve",
            "--dataset",
            "mixed",
            "--num-prompts",
            "5",
            "--input-len",
            "8",
            "--request-rate",
            "2",
            "--burstiness",
            "inf",
            "--long-lead",
            "1",
        ]) else {
            panic!("serve arguments should parse");
        };
        let common = &args.common;
        assert_eq!(common.dataset, DatasetKind::Mixed);
        assert_eq!((common.num_long_prompts, common.long_input_len), (1, 8000));
        assert_eq!(common.burstiness, f64::INFINITY);
        assert_eq!(common.long_lead, 1.0);
        assert_eq!(common.prompt_class_threshold(), 8000);
        assert_eq!(common.leading_requests(), 1);

        let Ok(Bench::Serve(random)) = parse(&["serve"]) else {
            panic!("serve arguments should parse");
        };
        assert_eq!(random.common.prompt_class_threshold(), 1024);
        assert_eq!(random.common.leading_requests(), 0);
        let Ok(Bench::Serve(given)) = parse(&["serve", "--long-prompt-threshold", "300"]) else {
            panic!("serve arguments should parse");
        };
        assert_eq!(given.common.prompt_class_threshold(), 300);
    }

    #[test]
    fn compare_takes_repeated_servers_and_refuses_spawn() {
        let Ok(Bench::Compare(args)) = parse(&[
            "compare",
            "--server",
            "llama-server=llama-server --port 8012",
            "--server",
            "tokenmill=tokenmill serve --port 8012",
            "--concurrency",
            "1,64",
            "--output-dir",
            "out",
        ]) else {
            panic!("compare arguments should parse");
        };
        let names: Vec<&str> = args.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["llama-server", "tokenmill"]);
        let sweep = args.sweep_for(&args.servers[1]);
        assert_eq!(
            sweep.common.spawn.as_deref(),
            Some("tokenmill serve --port 8012")
        );
        assert_eq!(sweep.output_dir, PathBuf::from("out/tokenmill"));
        assert_eq!(
            sweep.common.spawn_log,
            Some(PathBuf::from("out/tokenmill/server.log"))
        );
        assert_eq!(sweep.concurrency, vec![1, 64]);

        assert!(parse(&["compare", "--server", "a=x", "--spawn", "y"]).is_err());
        assert!(parse(&["compare", "--concurrency", "1"]).is_err());
    }

    #[test]
    fn tune_takes_a_list_per_knob_and_defaults_to_coarse_to_fine() {
        let Ok(Bench::Tune(args)) = parse(&[
            "tune",
            "--itl-p99-ms",
            "40",
            "--max-num-batched-tokens",
            "128,512",
            "--target-itl-ms",
            "25,50.5",
            "--spawn",
            "tokenmill serve --port 8020",
        ]) else {
            panic!("tune arguments should parse");
        };
        assert_eq!(args.itl_p99_ms, Some(40.0));
        assert_eq!(args.max_num_batched_tokens, vec![128, 512]);
        assert_eq!(args.max_num_seqs, vec![8, 16, 32, 64, 128]);
        assert!(args.long_prefill_token_threshold.is_empty());
        assert_eq!(args.target_itl_ms, vec![25.0, 50.5]);
        assert_eq!(args.search, TuneSearch::CoarseToFine);
        assert!(parse(&["tune", "--max-num-seqs", "8.5"]).is_err());
        assert!(parse(&["tune", "--search", "random"]).is_err());
    }
}
