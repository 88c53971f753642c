//! `Metrics`: request latencies and token counts, rendered with the engine's scheduler gauges in
//! Prometheus' text format under vLLM's metric names (prefix `tokenmill:`), and with
//! `--metrics-compat vllm` under vLLM's own prefix too (`vllm:`, with the info gauges endpoint
//! pickers read). See docs/metrics.md.

use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

use clap::ValueEnum;

use crate::api::api_error::REFUSAL_REASONS;
use crate::model::serving_config::ServingConfig;
use tokenmill_engine::sched::moe_expert_stats::ACTIVE_EXPERT_BUCKETS;
use tokenmill_engine::sched::request::RequestTimings;
use tokenmill_engine::sched::scheduler_stats::{SchedulerStats, STEP_BUCKETS};

/// Bucket bounds in seconds. First-token and whole-request latencies span milliseconds to
/// minutes; per-token gaps are tighter.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
    300.0, 600.0,
];
const TOKEN_GAP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5,
    5.0, 10.0,
];

/// Token mask computations of structured output span microseconds (a regex) to tens of
/// milliseconds (a large schema at a hard spot).
const MASK_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,
];

const MASK_HISTOGRAM: HistogramSpec = HistogramSpec {
    name: "structured_output_mask_seconds",
    help: "Time to compute one token mask of a constrained (structured output) request.",
    buckets: MASK_BUCKETS,
};

/// `--metrics-compat`: another engine's names to export the metrics under as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MetricsCompat {
    /// `vllm:*`, as the Gateway API Inference Extension's endpoint picker and vLLM
    /// dashboards read them.
    Vllm,
}

/// The prefix of the native names.
const NATIVE: &str = "tokenmill";

/// The ways a request can end, as `request_success`'s `finished_reason` label.
const FINISH_REASONS: [&str; 4] = ["stop", "length", "abort", "error"];

#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket counts (not cumulative); the last slot is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        let slot = self
            .bounds
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(self.bounds.len());
        self.counts[slot] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}

struct HistogramSpec {
    name: &'static str,
    help: &'static str,
    buckets: &'static [f64],
}

const HISTOGRAMS: [HistogramSpec; 7] = [
    HistogramSpec {
        name: "time_to_first_token_seconds",
        help: "Time from arrival to the first generated token.",
        buckets: LATENCY_BUCKETS,
    },
    HistogramSpec {
        name: "inter_token_latency_seconds",
        help: "Time between consecutive generated tokens of one request.",
        buckets: TOKEN_GAP_BUCKETS,
    },
    HistogramSpec {
        name: "request_time_per_output_token_seconds",
        help: "Mean time per output token after the first, per request.",
        buckets: TOKEN_GAP_BUCKETS,
    },
    HistogramSpec {
        name: "e2e_request_latency_seconds",
        help: "Time from arrival to the end of a request.",
        buckets: LATENCY_BUCKETS,
    },
    HistogramSpec {
        name: "request_queue_time_seconds",
        help: "Time from arrival until first scheduled.",
        buckets: LATENCY_BUCKETS,
    },
    HistogramSpec {
        name: "request_prefill_time_seconds",
        help: "Time from first scheduled to the first token.",
        buckets: LATENCY_BUCKETS,
    },
    HistogramSpec {
        name: "request_decode_time_seconds",
        help: "Time from the first token to the end of a request.",
        buckets: LATENCY_BUCKETS,
    },
];

// Indexes into `HISTOGRAMS`.
const TTFT: usize = 0;
const ITL: usize = 1;
const TPOT: usize = 2;
const E2E: usize = 3;
const QUEUE: usize = 4;
const PREFILL: usize = 5;
const DECODE: usize = 6;

struct Recorded {
    histograms: Vec<Histogram>,
    prompt_tokens: u64,
    generation_tokens: u64,
    successes: [u64; FINISH_REASONS.len()],
    refusals: [u64; REFUSAL_REASONS.len()],
}

/// One ended request as the metrics see it.
pub struct FinishedRequest<'a> {
    /// `stop`, `length` or `abort`.
    pub reason: &'a str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Absent when the request was dropped before the engine reported its end.
    pub timings: Option<&'a RequestTimings>,
}

pub struct Metrics {
    model_name: String,
    /// The KV cache's settings, for `cache_config_info` (absent in unit tests).
    config: Option<ServingConfig>,
    /// `--metrics-compat`: also render under another engine's names.
    compat: Option<MetricsCompat>,
    recorded: Mutex<Recorded>,
    /// Apart from `recorded`: every constrained token takes this lock, from sampling threads.
    masks: Mutex<Histogram>,
}

impl Metrics {
    pub fn new(model_name: impl Into<String>) -> Self {
        Self {
            model_name: model_name.into(),
            config: None,
            compat: None,
            recorded: Mutex::new(Recorded {
                histograms: HISTOGRAMS
                    .iter()
                    .map(|h| Histogram::new(h.buckets))
                    .collect(),
                prompt_tokens: 0,
                generation_tokens: 0,
                successes: [0; FINISH_REASONS.len()],
                refusals: [0; REFUSAL_REASONS.len()],
            }),
            masks: Mutex::new(Histogram::new(MASK_BUCKETS)),
        }
    }

    /// Reports `config` in `cache_config_info`, and renders vLLM's names too under `compat`.
    pub fn with_compat(self, compat: Option<MetricsCompat>, config: &ServingConfig) -> Self {
        Self {
            config: Some(config.clone()),
            compat,
            ..self
        }
    }

    /// One token mask of a constrained request took this long.
    pub fn record_mask_time(&self, seconds: f64) {
        if let Ok(mut masks) = self.masks.lock() {
            masks.observe(seconds);
        }
    }

    pub fn record(&self, done: FinishedRequest<'_>) {
        let Ok(mut r) = self.recorded.lock() else {
            return;
        };
        r.prompt_tokens += done.prompt_tokens as u64;
        r.generation_tokens += done.completion_tokens as u64;
        if let Some(slot) = FINISH_REASONS.iter().position(|&f| f == done.reason) {
            r.successes[slot] += 1;
        }
        if let Some(t) = done.timings {
            observe_timings(&mut r.histograms, t, done.completion_tokens);
        }
    }

    /// Counts a request refused before it reached the engine's queue (or by the queue itself:
    /// overloaded); `reason` is one of `REFUSAL_REASONS`.
    pub fn record_refusal(&self, reason: &str) {
        let Ok(mut r) = self.recorded.lock() else {
            return;
        };
        if let Some(slot) = REFUSAL_REASONS.iter().position(|&f| f == reason) {
            r.refusals[slot] += 1;
        }
    }

    /// The whole exposition: request metrics plus the scheduler's live gauges and counters,
    /// under the native names and, with `--metrics-compat vllm`, vLLM's.
    pub fn render(&self, stats: &SchedulerStats) -> String {
        let mut out = String::new();
        self.render_prefixed(&mut out, stats, NATIVE);
        if self.compat == Some(MetricsCompat::Vllm) {
            self.render_prefixed(&mut out, stats, "vllm");
            self.render_vllm_only(&mut out, stats);
        }
        out
    }

    /// Every family under `prefix`; tokenmill's own (step times, structured output, MoE,
    /// refusals) only under the native prefix, since vLLM has no such series.
    fn render_prefixed(&self, out: &mut String, stats: &SchedulerStats, prefix: &str) {
        let native = prefix == NATIVE;
        let label = format!("model_name=\"{}\"", escape_label(&self.model_name));
        let sample_family =
            |out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
                sample_family(out, prefix, name, kind, help, samples)
            };
        let histogram_family = |out: &mut String, spec: &HistogramSpec, h: &Histogram| {
            histogram_family(out, prefix, spec, h, &label)
        };
        let gauge = |out: &mut String, name: &str, help: &str, value: f64| {
            sample_family(out, name, "gauge", help, &[(label.clone(), value)]);
        };
        gauge(
            out,
            "num_requests_running",
            "Requests in the running batch.",
            stats.num_running as f64,
        );
        gauge(
            out,
            "num_requests_waiting",
            "Requests waiting to be scheduled.",
            stats.num_waiting as f64,
        );
        gauge(
            out,
            "kv_cache_usage_perc",
            "Fraction of KV-cache blocks in use (0 to 1).",
            stats.kv_cache_usage,
        );
        self.render_cache_config(out, prefix);
        if let Some(c) = self.config.as_ref().filter(|_| native) {
            sample_family(
                out,
                "cpu_kernel_info",
                "gauge",
                "The matmul path this process runs, in the `kernel` label.",
                &[(format!("kernel=\"{}\"", c.cpu_kernel), 1.0)],
            );
            gauge(
                out,
                "kv_cache_blocks",
                "Pages in the KV pool, each a block of tokens of one KV cache group's layers.",
                c.num_kv_blocks as f64,
            );
            let capacity = c.kv_capacity;
            sample_family(
                out,
                "kv_cache_capacity_tokens",
                "gauge",
                "Tokens the KV pool holds: at short context (a page per block in every KV cache \
                 group), and for one sequence alone (sliding-window groups holding only their window).",
                &[
                    (
                        format!("{label},context=\"short\""),
                        capacity.short_context as f64,
                    ),
                    (
                        format!("{label},context=\"one_sequence\""),
                        capacity.one_sequence as f64,
                    ),
                ],
            );
        }
        let counter = |out: &mut String, name: &str, help: &str, value: f64| {
            sample_family(
                out,
                &format!("{name}_total"),
                "counter",
                help,
                &[(label.clone(), value)],
            );
        };
        counter(
            out,
            "prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            stats.prefix_cache_queries as f64,
        );
        counter(
            out,
            "prefix_cache_hits",
            "Prompt tokens found in the prefix cache.",
            stats.prefix_cache_hits as f64,
        );
        counter(
            out,
            "external_prefix_cache_queries",
            "Prompt tokens looked up while the disk tier (--kv-offload-dir) was on.",
            stats.disk_cache_queries as f64,
        );
        counter(
            out,
            "external_prefix_cache_hits",
            "Prompt tokens of prefix-cache hits read from the disk tier (--kv-offload-dir).",
            stats.disk_cache_hits as f64,
        );
        let disk = &stats.kv_offload;
        counter(
            out,
            "kv_offload_blocks_written",
            "Blocks the disk tier (--kv-offload-dir) wrote.",
            disk.blocks_written as f64,
        );
        counter(
            out,
            "kv_offload_blocks_skipped",
            "Blocks the disk tier did not write: its queue was full, or its disk was.",
            disk.blocks_skipped as f64,
        );
        counter(
            out,
            "kv_offload_write_failures",
            "Block writes the disk tier attempted that failed (a full disk's first among them).",
            disk.write_failures as f64,
        );
        counter(
            out,
            "num_preemptions",
            "Times a running request was preempted.",
            stats.num_preemptions as f64,
        );
        let spec = &stats.spec_decode;
        counter(
            out,
            "spec_decode_num_drafts",
            "Verify chunks that carried at least one draft token (speculative decoding).",
            spec.num_drafts as f64,
        );
        counter(
            out,
            "spec_decode_num_draft_tokens",
            "Draft tokens verified.",
            spec.num_draft_tokens as f64,
        );
        counter(
            out,
            "spec_decode_num_accepted_tokens",
            "Draft tokens accepted (equal to the token the model produced there).",
            spec.num_accepted_tokens as f64,
        );
        let per_pos: Vec<(String, f64)> = spec
            .num_accepted_tokens_per_pos
            .iter()
            .enumerate()
            .map(|(i, &n)| (format!("{label},position=\"{i}\""), n as f64))
            .collect();
        sample_family(
            out,
            "spec_decode_num_accepted_tokens_per_pos_total",
            "counter",
            "Draft tokens accepted at each draft position (0: the first draft).",
            &per_pos,
        );
        if !native {
            return self.render_recorded(out, prefix, &label);
        }
        counter(
            out,
            "step_prefill_tokens",
            "Prompt tokens computed by engine steps (what --target-itl-ms rations).",
            stats.prefill_tokens as f64,
        );
        if let Some(error) = stats.step_prediction_error {
            gauge(
                out,
                "step_time_prediction_error_ratio",
                "Mean |predicted - measured| / measured step time of the step cost model.",
                error,
            );
        }
        let steps = Histogram {
            bounds: &STEP_BUCKETS,
            counts: stats.step_seconds.counts.to_vec(),
            sum: stats.step_seconds.sum,
            count: stats.step_seconds.count,
        };
        let spec = HistogramSpec {
            name: "step_time_seconds",
            help: "Wall time of each engine step, schedule to update: the inter-token gap.",
            buckets: &STEP_BUCKETS,
        };
        histogram_family(out, &spec, &steps);
        if let Ok(masks) = self.masks.lock() {
            histogram_family(out, &MASK_HISTOGRAM, &masks);
        }
        if let Some(moe) = &stats.moe_active_experts {
            let experts = Histogram {
                bounds: &ACTIVE_EXPERT_BUCKETS,
                counts: moe.counts.to_vec(),
                sum: moe.sum,
                count: moe.count,
            };
            let spec = HistogramSpec {
                name: "moe_active_experts",
                help: "Distinct experts each engine step ran per MoE layer (mean over MoE layers).",
                buckets: &ACTIVE_EXPERT_BUCKETS,
            };
            histogram_family(out, &spec, &experts);
        }
        self.render_recorded(out, prefix, &label);
    }

    /// The counters and histograms of ended requests (and, natively, the refusals).
    fn render_recorded(&self, out: &mut String, prefix: &str, label: &str) {
        let Ok(r) = self.recorded.lock() else {
            return;
        };
        let counter = |out: &mut String, name: &str, help: &str, value: f64| {
            sample_family(
                out,
                prefix,
                &format!("{name}_total"),
                "counter",
                help,
                &[(label.to_owned(), value)],
            );
        };
        counter(
            out,
            "prompt_tokens",
            "Prompt tokens of finished requests.",
            r.prompt_tokens as f64,
        );
        counter(
            out,
            "generation_tokens",
            "Generated tokens of finished requests.",
            r.generation_tokens as f64,
        );
        let successes: Vec<(String, f64)> = FINISH_REASONS
            .iter()
            .zip(r.successes)
            .map(|(reason, n)| (format!("{label},finished_reason=\"{reason}\""), n as f64))
            .collect();
        sample_family(
            out,
            prefix,
            "request_success_total",
            "counter",
            "Finished requests by finish reason.",
            &successes,
        );
        if prefix == NATIVE {
            let refusals: Vec<(String, f64)> = REFUSAL_REASONS
                .iter()
                .zip(r.refusals)
                .map(|(reason, n)| (format!("{label},reason=\"{reason}\""), n as f64))
                .collect();
            sample_family(
                out,
                prefix,
                "requests_refused_total",
                "counter",
                "Requests refused with an error status before any generation, by reason.",
                &refusals,
            );
        }
        for (spec, histogram) in HISTOGRAMS.iter().zip(&r.histograms) {
            histogram_family(out, prefix, spec, histogram, label);
        }
        if prefix != NATIVE {
            // vLLM's older name for the inter-token latency, still read by dashboards.
            let spec = HistogramSpec {
                name: "time_per_output_token_seconds",
                ..HISTOGRAMS[ITL]
            };
            histogram_family(out, prefix, &spec, &r.histograms[ITL], label);
        }
    }

    /// vLLM's info gauge of the KV cache's settings (value 1, the settings in labels), which
    /// an endpoint picker's prefix scorer reads `block_size` and `num_gpu_blocks` from.
    fn render_cache_config(&self, out: &mut String, prefix: &str) {
        let Some(c) = &self.config else {
            return;
        };
        let prefix_caching = if c.enable_prefix_caching {
            "True"
        } else {
            "False"
        };
        sample_family(
            out,
            prefix,
            "cache_config_info",
            "gauge",
            "Information of the KV cache's configuration, in labels.",
            &[(
                format!(
                    "block_size=\"{}\",cache_dtype=\"{}\",enable_prefix_caching=\"{prefix_caching}\",\
                     num_gpu_blocks=\"{}\",num_cpu_blocks=\"0\",prefix_caching_hash_algo=\"sha256\"",
                    c.block_size, c.kv_cache_dtype, c.num_kv_blocks
                ),
                1.0,
            )],
        );
    }

    /// The series vLLM has and tokenmill's names do not: its older names for KV usage and
    /// the prefix cache, and the info gauges an endpoint picker reads labels from.
    fn render_vllm_only(&self, out: &mut String, stats: &SchedulerStats) {
        let label = format!("model_name=\"{}\"", escape_label(&self.model_name));
        let one = |value: f64| [(label.clone(), value)];
        sample_family(
            out,
            "vllm",
            "gpu_cache_usage_perc",
            "gauge",
            "Fraction of KV-cache blocks in use (0 to 1); vLLM's older name of kv_cache_usage_perc.",
            &one(stats.kv_cache_usage),
        );
        sample_family(
            out,
            "vllm",
            "gpu_prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prefix cache; vLLM's older name.",
            &one(stats.prefix_cache_queries as f64),
        );
        sample_family(
            out,
            "vllm",
            "gpu_prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache; vLLM's older name.",
            &one(stats.prefix_cache_hits as f64),
        );
        // vLLM's shape: the value is the time of the report, the adapters are labels.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        sample_family(
            out,
            "vllm",
            "lora_requests_info",
            "gauge",
            "Running and waiting LoRA adapters (none: tokenmill serves no adapters).",
            &[(
                "max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"".to_owned(),
                now,
            )],
        );
    }
}

fn observe_timings(histograms: &mut [Histogram], t: &RequestTimings, completion_tokens: usize) {
    let secs = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64();
    if let Some(first) = t.first_token {
        histograms[TTFT].observe(secs(t.arrival, first));
    }
    for pair in t.token_times.windows(2) {
        histograms[ITL].observe(secs(pair[0], pair[1]));
    }
    if let (Some(first), Some(last)) = (t.first_token, t.token_times.last()) {
        if completion_tokens > 1 {
            let per_token = last.saturating_duration_since(first) / (completion_tokens as u32 - 1);
            histograms[TPOT].observe(per_token.as_secs_f64());
        }
    }
    if let Some(end) = t.finished {
        histograms[E2E].observe(secs(t.arrival, end));
        if let Some(first) = t.first_token {
            histograms[DECODE].observe(secs(first, end));
        }
    }
    if let Some(scheduled) = t.first_scheduled {
        histograms[QUEUE].observe(secs(t.arrival, scheduled));
        if let Some(first) = t.first_token {
            histograms[PREFILL].observe(secs(scheduled, first));
        }
    }
}

fn sample_family(
    out: &mut String,
    prefix: &str,
    name: &str,
    kind: &str,
    help: &str,
    samples: &[(String, f64)],
) {
    let name = format!("{prefix}:{name}");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

fn histogram_family(
    out: &mut String,
    prefix: &str,
    spec: &HistogramSpec,
    h: &Histogram,
    label: &str,
) {
    let name = format!("{prefix}:{}", spec.name);
    let _ = writeln!(out, "# HELP {name} {}", spec.help);
    let _ = writeln!(out, "# TYPE {name} histogram");
    let mut cumulative = 0;
    for (bound, count) in h.bounds.iter().zip(&h.counts) {
        cumulative += count;
        let _ = writeln!(out, "{name}_bucket{{{label},le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{label}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{label}}} {}", h.count);
}

/// Prometheus label values escape backslash, quote and newline.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Reads one unlabelled-beyond-`model_name` sample back out of a rendering (for tests and tools).
pub fn sample_value(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            let bare = name.split('{').next()?;
            (bare == series || name == series).then(|| value.parse().ok())?
        })
}

#[cfg(test)]
mod tests;
