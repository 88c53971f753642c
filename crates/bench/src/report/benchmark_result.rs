//! The result of one run, computed from its request records with vllm bench serve's definitions.

use std::time::{Duration, Instant};

use crate::load::client::{Reply, RequestRecord};
use crate::load::load_plan::span_s;
use crate::load::request_rate::RequestRate;
use crate::report::class_latencies::ClassLatencies;
use crate::report::distribution::Distribution;
use crate::report::goodput::{self, RequestLatencies, Slo};
use crate::report::spec_decode_report::SpecDecodeReport;

/// Describes the run, for the report; not measured.
#[derive(Clone, Debug)]
pub struct RunSettings {
    pub backend: String,
    pub model_id: String,
    pub num_prompts: usize,
    pub request_rate: RequestRate,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    pub percentiles: Vec<f64>,
    pub goodput: Vec<Slo>,
    /// Prompt tokens from which a request counts as long in `by_class`.
    pub long_prompt_threshold: usize,
}

/// Everything a run measured. Latencies are in milliseconds, throughputs per second.
#[derive(Clone, Debug)]
pub struct BenchmarkResult {
    pub settings: RunSettings,
    pub duration_s: f64,
    pub completed: usize,
    pub failed: usize,
    pub total_input_tokens: usize,
    pub total_output_tokens: usize,
    pub request_throughput: f64,
    /// Requests per second meeting every objective; `None` without `--goodput`.
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub max_concurrent_requests: usize,
    /// Per request, in dataset order; failed requests have zeros and an error message.
    pub input_lens: Vec<usize>,
    pub output_lens: Vec<usize>,
    pub ttfts_s: Vec<f64>,
    pub itls_s: Vec<Vec<f64>>,
    /// When each request was sent and when its reply ended (failures included), in seconds
    /// from the run's first send: with the TTFTs they place every request on the run's clock,
    /// which is what a router's load counts see.
    pub sent_s: Vec<f64>,
    pub finished_s: Vec<f64>,
    pub errors: Vec<String>,
    /// Per request, in dataset order, the generated text; empty for failed requests.
    pub generated_texts: Vec<String>,
    pub ttft: Distribution,
    pub tpot: Distribution,
    pub itl: Distribution,
    pub e2el: Distribution,
    /// TTFT and E2EL per prompt-length class, short before long; empty when every request
    /// falls in one class.
    pub by_class: Vec<ClassLatencies>,
    /// Successful requests whose server token count and content-chunk count differ by over 2%.
    pub token_count_mismatches: usize,
    pub client_cpu_s: Option<f64>,
    /// Drafted and accepted tokens, when the server speculates and says so (its `/metrics`
    /// counters, else its replies' `timings`).
    pub spec_decode: Option<SpecDecodeReport>,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl BenchmarkResult {
    /// Computes the result. Failed requests count in `failed` and in the duration, but in no
    /// latency and no token total.
    pub fn from_records(
        settings: RunSettings,
        records: &[RequestRecord],
        max_concurrent_requests: usize,
    ) -> Self {
        let duration_s = span_s(records);
        let per_second = |count: usize| {
            if duration_s > 0.0 {
                count as f64 / duration_s
            } else {
                0.0
            }
        };
        let replies: Vec<(&RequestRecord, &Reply)> = records
            .iter()
            .filter_map(|r| r.reply().map(|reply| (r, reply)))
            .collect();
        let total_input_tokens = replies.iter().map(|(r, _)| r.prompt_len).sum();
        let total_output_tokens = replies.iter().map(|(_, reply)| reply.output_tokens()).sum();
        let good = replies
            .iter()
            .filter(|(_, reply)| goodput::meets_all(&settings.goodput, &latencies(reply)))
            .count();
        let [ttft, tpot, itl, e2el] = distributions(&replies, &settings.percentiles);
        let columns = PerRequest::of(records);
        let by_class = ClassLatencies::split(
            records,
            settings.long_prompt_threshold,
            &settings.percentiles,
        );
        BenchmarkResult {
            duration_s,
            completed: replies.len(),
            failed: records.len() - replies.len(),
            total_input_tokens,
            total_output_tokens,
            request_throughput: per_second(replies.len()),
            request_goodput: (!settings.goodput.is_empty()).then(|| per_second(good)),
            output_throughput: per_second(total_output_tokens),
            total_token_throughput: per_second(total_input_tokens + total_output_tokens),
            max_concurrent_requests,
            input_lens: columns.input_lens,
            output_lens: columns.output_lens,
            ttfts_s: columns.ttfts_s,
            itls_s: columns.itls_s,
            sent_s: columns.sent_s,
            finished_s: columns.finished_s,
            errors: columns.errors,
            generated_texts: columns.generated_texts,
            ttft,
            tpot,
            itl,
            e2el,
            by_class,
            token_count_mismatches: replies
                .iter()
                .filter(|(_, reply)| counts_disagree(reply))
                .count(),
            client_cpu_s: None,
            spec_decode: SpecDecodeReport::from_replies(
                replies
                    .iter()
                    .filter_map(|(_, reply)| reply.drafts.as_ref()),
            ),
            settings,
        }
    }
}

/// TTFT, TPOT, ITL and E2EL of the successful requests, in milliseconds.
fn distributions(replies: &[(&RequestRecord, &Reply)], percentiles: &[f64]) -> [Distribution; 4] {
    let ttfts: Vec<f64> = replies.iter().map(|(_, reply)| ms(reply.ttft())).collect();
    let tpots: Vec<f64> = replies
        .iter()
        .filter_map(|(_, reply)| reply.tpot().map(ms))
        .collect();
    let itls: Vec<f64> = replies
        .iter()
        .flat_map(|(_, reply)| reply.itls().map(ms))
        .collect();
    let e2els: Vec<f64> = replies.iter().map(|(_, reply)| ms(reply.e2el())).collect();
    [ttfts, tpots, itls, e2els].map(|values| Distribution::of(&values, percentiles))
}

/// The per-request lists of the saved JSON, in dataset order; failed requests get zeros.
struct PerRequest {
    input_lens: Vec<usize>,
    output_lens: Vec<usize>,
    ttfts_s: Vec<f64>,
    itls_s: Vec<Vec<f64>>,
    sent_s: Vec<f64>,
    finished_s: Vec<f64>,
    errors: Vec<String>,
    generated_texts: Vec<String>,
}

impl PerRequest {
    fn of(records: &[RequestRecord]) -> Self {
        let mut columns = PerRequest {
            input_lens: Vec::with_capacity(records.len()),
            output_lens: Vec::with_capacity(records.len()),
            ttfts_s: Vec::with_capacity(records.len()),
            itls_s: Vec::with_capacity(records.len()),
            sent_s: Vec::with_capacity(records.len()),
            finished_s: Vec::with_capacity(records.len()),
            errors: Vec::with_capacity(records.len()),
            generated_texts: Vec::with_capacity(records.len()),
        };
        let first_send = records.iter().map(|r| r.sent_at).min();
        let since_first = |at: Instant| first_send.map_or(0.0, |first| (at - first).as_secs_f64());
        for record in records {
            columns.sent_s.push(since_first(record.sent_at));
            columns.finished_s.push(since_first(record.finished_at));
            match &record.outcome {
                Ok(reply) => {
                    columns.input_lens.push(record.prompt_len);
                    columns.output_lens.push(reply.output_tokens());
                    columns.ttfts_s.push(reply.ttft().as_secs_f64());
                    columns
                        .itls_s
                        .push(reply.itls().map(|d| d.as_secs_f64()).collect());
                    columns.errors.push(String::new());
                    columns.generated_texts.push(reply.text.clone());
                }
                Err(error) => {
                    columns.input_lens.push(0);
                    columns.output_lens.push(0);
                    columns.ttfts_s.push(0.0);
                    columns.itls_s.push(Vec::new());
                    columns.errors.push(error.clone());
                    columns.generated_texts.push(String::new());
                }
            }
        }
        columns
    }
}

fn latencies(reply: &Reply) -> RequestLatencies {
    RequestLatencies {
        ttft_ms: ms(reply.ttft()),
        tpot_ms: reply.tpot().map(ms),
        e2el_ms: ms(reply.e2el()),
    }
}

/// Servers may pack several tokens into one chunk; beyond 2% the ITLs no longer describe
/// single tokens, which the report should say.
fn counts_disagree(reply: &Reply) -> bool {
    let Some(server) = reply.usage_completion_tokens else {
        return false;
    };
    let chunks = reply.content_offsets.len();
    server.abs_diff(chunks) as f64 > 0.02 * server.max(chunks) as f64
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Instant;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    pub(crate) fn settings(goodput: &[&str]) -> RunSettings {
        RunSettings {
            backend: "openai".into(),
            model_id: "m".into(),
            num_prompts: 3,
            request_rate: RequestRate::Infinite,
            burstiness: 1.0,
            max_concurrency: None,
            percentiles: vec![50.0, 99.0],
            goodput: goodput.iter().map(|s| s.parse().unwrap()).collect(),
            long_prompt_threshold: 1024,
        }
    }

    fn record(
        start: Instant,
        sent_ms: u64,
        offsets_ms: &[u64],
        usage: Option<usize>,
        end_ms: u64,
    ) -> RequestRecord {
        let reply = Reply {
            content_offsets: offsets_ms.iter().map(|&o| ms(o)).collect(),
            usage_completion_tokens: usage,
            text: "x".repeat(offsets_ms.len()),
            drafts: None,
        };
        RequestRecord {
            sent_at: start + ms(sent_ms),
            finished_at: start + ms(end_ms),
            prompt_len: 10,
            outcome: Ok(reply),
        }
    }

    /// Two successes and one failure, with hand-picked timings.
    pub(crate) fn sample(goodput: &[&str]) -> BenchmarkResult {
        let start = Instant::now();
        let records = vec![
            // TTFT 100, chunks every 50 ms, 3 tokens: TPOT 50, E2EL 200.
            record(start, 0, &[100, 150, 200], Some(3), 210),
            // TTFT 300, one token: no TPOT, no ITL.
            record(start, 100, &[300], Some(1), 400),
            RequestRecord {
                sent_at: start + ms(50),
                finished_at: start + ms(1000),
                prompt_len: 10,
                outcome: Err("timed out".into()),
            },
        ];
        BenchmarkResult::from_records(settings(goodput), &records, 3)
    }

    #[test]
    fn latencies_come_from_successes_only() {
        let result = sample(&[]);
        assert_eq!((result.completed, result.failed), (2, 1));
        assert_eq!(result.ttft.mean, 200.0);
        assert_eq!(result.tpot.percentiles, vec![(50.0, 50.0), (99.0, 50.0)]);
        assert_eq!(result.itl.mean, 50.0);
        assert_eq!(result.e2el.median, 250.0);
        assert_eq!(result.errors, vec!["", "", "timed out"]);
        assert_eq!(result.output_lens, vec![3, 1, 0]);
        assert_eq!(result.generated_texts, vec!["xxx", "x", ""]);
        assert_eq!(
            result.sent_s,
            vec![0.0, 0.1, 0.05],
            "failures keep their times"
        );
        assert_eq!(result.finished_s, vec![0.21, 0.4, 1.0]);
        assert_eq!(result.spec_decode, None, "no reply reported drafts");
        assert!(result.by_class.is_empty(), "all prompts are short");
    }

    #[test]
    fn prompts_on_both_sides_of_the_threshold_get_per_class_latencies() {
        let mut settings = settings(&[]);
        settings.long_prompt_threshold = 10;
        let start = Instant::now();
        let mut short = record(start, 0, &[40, 50], Some(2), 60);
        short.prompt_len = 9;
        let long = record(start, 0, &[100, 150, 200], Some(3), 210);
        let result = BenchmarkResult::from_records(settings, &[long, short], 2);
        let classes: Vec<(&str, usize, f64, f64)> = result
            .by_class
            .iter()
            .map(|c| (c.class.name(), c.requests, c.ttft.median, c.e2el.max))
            .collect();
        assert_eq!(
            classes,
            vec![("short", 1, 40.0, 50.0), ("long", 1, 100.0, 200.0)]
        );
    }

    #[test]
    fn throughput_divides_by_first_send_to_last_finish_including_failures() {
        let result = sample(&[]);
        assert_eq!(result.duration_s, 1.0);
        assert_eq!(result.total_output_tokens, 4);
        assert_eq!(result.total_input_tokens, 20);
        assert_eq!(result.output_throughput, 4.0);
        assert_eq!(result.total_token_throughput, 24.0);
        assert_eq!(result.request_throughput, 2.0);
        assert_eq!(result.request_goodput, None);
    }

    #[test]
    fn goodput_counts_successes_meeting_every_objective() {
        assert_eq!(sample(&["ttft:150"]).request_goodput, Some(1.0));
        assert_eq!(sample(&["ttft:300", "tpot:49"]).request_goodput, Some(1.0));
        assert_eq!(sample(&["e2el:300"]).request_goodput, Some(2.0));
    }

    #[test]
    fn chunk_and_server_counts_differing_over_two_percent_are_flagged() {
        let start = Instant::now();
        let agree = record(start, 0, &[1, 2, 3], Some(3), 4);
        let differ = record(start, 0, &[1, 2, 3], Some(6), 4);
        let result = BenchmarkResult::from_records(settings(&[]), &[agree, differ], 1);
        assert_eq!(result.token_count_mismatches, 1);
    }
}
