//! A benchmark ready to run: the server resolved, the model chosen and the prompts built.

use std::sync::Arc;
use std::time::Duration;

use crate::args::{CommonArgs, DatasetKind};
use crate::datasets::dataset;
use crate::datasets::token_counter::TokenCounter;
use crate::load::arrivals::ArrivalSchedule;
use crate::load::bench_request::BenchRequest;
use crate::load::client::RequestTarget;
use crate::load::cpu_time::process_cpu_time;
use crate::load::endpoint::Endpoint;
use crate::load::load_plan::{self, LoadPlan};
use crate::load::progress::Progress;
use crate::load::request_rate::RequestRate;
use crate::load::target_server::TargetServer;
use crate::report::benchmark_result::{BenchmarkResult, RunSettings};
use crate::report::spec_decode_report::{SpecDecodeCounters, SpecDecodeReport};

/// Wait between the last reply and the second counter scrape.
const COUNTER_SETTLE: Duration = Duration::from_millis(200);

/// Load applied in one run; a sweep changes one of these per level.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub max_concurrency: Option<usize>,
    pub request_rate: RequestRate,
    /// Seeds the arrival gaps; sweeps vary it between runs so repeats sample new arrivals.
    pub arrival_seed: u64,
}

/// Everything a run needs that does not change between runs.
pub struct PreparedBenchmark {
    args: CommonArgs,
    target: Arc<RequestTarget>,
    requests: Vec<BenchRequest>,
}

impl PreparedBenchmark {
    pub async fn new(args: &CommonArgs) -> anyhow::Result<Self> {
        validate(args)?;
        let server = TargetServer::new(&args.base_url, args.api_key.as_deref())?;
        let model = match &args.model {
            Some(model) => model.clone(),
            None => server.first_model().await?,
        };
        let counter = match &args.tokenizer_base_url {
            Some(url) => {
                let tokenizing = TargetServer::new(url, args.api_key.as_deref())?;
                TokenCounter::for_server(&tokenizing, &model).await
            }
            None => TokenCounter::for_server(&server, &model).await,
        };
        let requests = dataset::load(args, &counter).await?;
        let target = RequestTarget {
            server,
            endpoint: args.endpoint,
            model,
            ignore_eos: args.ignore_eos,
            extra_body: args.extra_body.clone().unwrap_or_default(),
            timeout: Duration::from_secs_f64(args.timeout),
        };
        Ok(PreparedBenchmark {
            args: args.clone(),
            target: Arc::new(target),
            requests,
        })
    }

    /// Warms up, sends every request under `load` and computes the result.
    pub async fn run(&self, load: Load, label: &str) -> anyhow::Result<BenchmarkResult> {
        let args = &self.args;
        load_plan::warm_up(
            &self.target,
            &self.requests,
            args.num_warmups,
            load.max_concurrency,
        )
        .await?;
        // The mixed dataset's long prompts lead: all leave at once, ahead of the schedule.
        let leaders = args.leading_requests();
        let schedule = ArrivalSchedule::new(
            self.requests.len().saturating_sub(leaders),
            load.request_rate,
            args.burstiness,
            load.arrival_seed,
        )?
        .led_by(leaders, Duration::from_secs_f64(args.long_lead));
        let plan = LoadPlan::new(schedule, load.max_concurrency)?;
        let progress = Arc::new(Progress::new(
            label,
            self.requests.len(),
            !args.no_progress_bar,
        ));
        let spec_before = self.spec_decode_counters().await;
        let cpu_before = process_cpu_time();
        let outcome = plan
            .execute(&self.target, &self.requests, &progress)
            .await?;
        let cpu_used = process_cpu_time().saturating_sub(cpu_before);
        progress.finish();
        let spec_after = match spec_before {
            Some(_) => {
                // A server may count a request's drafts only as it retires it, just after the
                // reply's last bytes left; a moment's wait keeps the last ones in this run.
                tokio::time::sleep(COUNTER_SETTLE).await;
                self.spec_decode_counters().await
            }
            None => None,
        };
        let mut result = BenchmarkResult::from_records(
            self.settings(load),
            &outcome.records,
            outcome.peak_in_flight,
        );
        result.client_cpu_s = Some(cpu_used.as_secs_f64());
        if let (Some(before), Some(after)) = (&spec_before, &spec_after) {
            // The counters see every draft; replies' own timings are the fallback.
            result.spec_decode = Some(SpecDecodeReport::from_counters(before, after));
        }
        warn_about(&result);
        Ok(result)
    }

    /// The server's `spec_decode` counters now, when its `/metrics` has them.
    async fn spec_decode_counters(&self) -> Option<SpecDecodeCounters> {
        let text = self.target.server.metrics_text().await?;
        SpecDecodeCounters::parse(&text)
    }

    /// The prompts of the run, in the order they are sent.
    pub fn requests(&self) -> &[BenchRequest] {
        &self.requests
    }

    pub fn model(&self) -> &str {
        &self.target.model
    }

    pub fn backend(&self) -> &'static str {
        match self.args.endpoint {
            Endpoint::Completions => "openai",
            Endpoint::Chat => "openai-chat",
        }
    }

    fn settings(&self, load: Load) -> RunSettings {
        RunSettings {
            backend: self.backend().to_owned(),
            model_id: self.target.model.clone(),
            num_prompts: self.requests.len(),
            request_rate: load.request_rate,
            burstiness: self.args.burstiness,
            max_concurrency: load.max_concurrency,
            percentiles: self.args.percentiles.clone(),
            goodput: self.args.goodput.clone(),
            long_prompt_threshold: self.args.prompt_class_threshold(),
        }
    }
}

fn validate(args: &CommonArgs) -> anyhow::Result<()> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        anyhow::bail!(
            "--timeout must be a positive number of seconds, got {}",
            args.timeout
        );
    }
    if !(args.long_lead.is_finite() && args.long_lead >= 0.0) {
        anyhow::bail!(
            "--long-lead must be a number of seconds, zero or more, got {}",
            args.long_lead
        );
    }
    if args.long_lead > 0.0 && args.dataset != DatasetKind::Mixed {
        anyhow::bail!("--long-lead applies to --dataset mixed only");
    }
    if let Some(p) = args
        .percentiles
        .iter()
        .find(|p| !(0.0..=100.0).contains(*p))
    {
        anyhow::bail!("--percentiles must lie in [0, 100], got {p}");
    }
    Ok(())
}

fn warn_about(result: &BenchmarkResult) {
    if result.token_count_mismatches > 0 {
        eprintln!(
            "warning: in {} requests the server's completion_tokens and the content chunks received \
             differ by more than 2%; ITL then spans several tokens",
            result.token_count_mismatches
        );
    }
    if result.failed > 0 {
        let first = result
            .errors
            .iter()
            .find(|e| !e.is_empty())
            .map_or("", String::as_str);
        eprintln!(
            "warning: {} requests failed; first error: {first}",
            result.failed
        );
    }
}
