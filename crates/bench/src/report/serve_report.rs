//! The printed result table and the saved JSON, both in vllm bench serve's layout and names.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::{json, Map, Value};

use crate::report::benchmark_result::BenchmarkResult;
use crate::report::class_latencies::ClassLatencies;
use crate::report::distribution::{percentile_label, Distribution};

const WIDTH: usize = 50;
/// Draft positions whose acceptance the table shows.
const TABLE_POSITIONS: usize = 8;

/// The latency sections: JSON key, table abbreviation, section title, values.
fn latency_sections(
    result: &BenchmarkResult,
) -> [(&'static str, &'static str, &'static str, &Distribution); 4] {
    [
        ("ttft", "TTFT", "Time to First Token", &result.ttft),
        (
            "tpot",
            "TPOT",
            "Time per Output Token (excl. 1st token)",
            &result.tpot,
        ),
        ("itl", "ITL", "Inter-token Latency", &result.itl),
        ("e2el", "E2EL", "End-to-end Latency", &result.e2el),
    ]
}

fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{label:<40}{value:<10}");
}

fn line_f(out: &mut String, label: &str, value: f64) {
    let _ = writeln!(out, "{label:<40}{value:<10.2}");
}

/// The result table as printed at the end of `bench serve`.
pub fn table(result: &BenchmarkResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:=^WIDTH$}", " Serving Benchmark Result ");
    line(&mut out, "Successful requests:", result.completed);
    line(&mut out, "Failed requests:", result.failed);
    if let Some(limit) = result.settings.max_concurrency {
        line(&mut out, "Maximum request concurrency:", limit);
    }
    line(
        &mut out,
        "Request rate configured (RPS):",
        result.settings.request_rate,
    );
    line_f(&mut out, "Benchmark duration (s):", result.duration_s);
    line(&mut out, "Total input tokens:", result.total_input_tokens);
    line(
        &mut out,
        "Total generated tokens:",
        result.total_output_tokens,
    );
    line_f(
        &mut out,
        "Request throughput (req/s):",
        result.request_throughput,
    );
    if let Some(goodput) = result.request_goodput {
        line_f(&mut out, "Request goodput (req/s):", goodput);
    }
    line_f(
        &mut out,
        "Output token throughput (tok/s):",
        result.output_throughput,
    );
    line(
        &mut out,
        "Peak concurrent requests:",
        result.max_concurrent_requests,
    );
    line_f(
        &mut out,
        "Total Token throughput (tok/s):",
        result.total_token_throughput,
    );
    for (_, short, title, distribution) in latency_sections(result) {
        let _ = writeln!(out, "{:-^WIDTH$}", title);
        line_f(&mut out, &format!("Mean {short} (ms):"), distribution.mean);
        line_f(
            &mut out,
            &format!("Median {short} (ms):"),
            distribution.median,
        );
        for (p, value) in &distribution.percentiles {
            line_f(
                &mut out,
                &format!("P{} {short} (ms):", percentile_label(*p)),
                *value,
            );
        }
    }
    class_lines(&mut out, result);
    spec_decode_lines(&mut out, result);
    let _ = writeln!(out, "{:-^WIDTH$}", "Client");
    if let Some(cpu) = result.client_cpu_s {
        line_f(&mut out, "Client CPU time (s):", cpu);
    }
    let _ = writeln!(out, "{}", "=".repeat(WIDTH));
    out
}

/// Per prompt-length class, when the run has more than one: its requests, then the median,
/// the asked-for percentiles and the maximum of its TTFT and E2EL.
fn class_lines(out: &mut String, result: &BenchmarkResult) {
    if result.by_class.is_empty() {
        return;
    }
    let _ = writeln!(out, "{:-^WIDTH$}", "Latency by Prompt Length");
    line(
        out,
        "Long prompts from (tokens):",
        result.settings.long_prompt_threshold,
    );
    for class in &result.by_class {
        let name = class.class.name();
        line(
            out,
            &format!("Requests {name} (completed):"),
            format!("{} ({})", class.requests, class.completed),
        );
        for (short, distribution) in [("TTFT", &class.ttft), ("E2EL", &class.e2el)] {
            line_f(
                out,
                &format!("Median {short} {name} (ms):"),
                distribution.median,
            );
            for (p, value) in &distribution.percentiles {
                line_f(
                    out,
                    &format!("P{} {short} {name} (ms):", percentile_label(*p)),
                    *value,
                );
            }
            line_f(out, &format!("Max {short} {name} (ms):"), distribution.max);
        }
    }
}

/// Drafts and acceptance, when the server reported them: vLLM's acceptance rate (accepted over
/// drafted tokens) and mean acceptance length (tokens per verify step), and per draft position
/// the share of drafts accepted that far.
fn spec_decode_lines(out: &mut String, result: &BenchmarkResult) {
    let Some(stats) = &result.spec_decode else {
        return;
    };
    let _ = writeln!(out, "{:-^WIDTH$}", "Speculative Decoding");
    if let Some(drafts) = stats.num_drafts {
        line(out, "Drafts:", drafts);
    }
    line(out, "Draft tokens:", stats.num_draft_tokens);
    line(out, "Accepted tokens:", stats.num_accepted_tokens);
    let unknown = || "n/a".to_owned();
    line(
        out,
        "Draft acceptance rate (%):",
        stats
            .acceptance_rate()
            .map_or_else(unknown, |rate| format!("{:.2}", rate * 100.0)),
    );
    line(
        out,
        "Mean acceptance length:",
        stats
            .mean_acceptance_length()
            .map_or_else(unknown, |length| format!("{length:.2}")),
    );
    if let Some(per_pos) = stats.acceptance_rate_per_pos() {
        // Drafters of 48 or 64 tokens (llama-server's n-gram modes) would make an unreadable
        // line; the JSON keeps every position.
        let mut shares: Vec<String> = per_pos
            .iter()
            .take(TABLE_POSITIONS)
            .map(|r| format!("{r:.2}"))
            .collect();
        if per_pos.len() > TABLE_POSITIONS {
            shares.push(format!("… ({} positions)", per_pos.len()));
        }
        if !shares.is_empty() {
            line(out, "Acceptance rate per position:", shares.join(" "));
        }
    }
}

/// The result as JSON with vllm's field names (plus `client_cpu_time_s`, `spec_decode` when
/// the server reported drafts, and `ttft_by_class` and `e2el_by_class` when the prompts fall
/// in more than one length class).
pub fn to_json(result: &BenchmarkResult) -> Value {
    let settings = &result.settings;
    let mut fields = json!({
        "date": utc_timestamp(std::time::SystemTime::now()),
        "backend": settings.backend,
        "model_id": settings.model_id,
        "num_prompts": settings.num_prompts,
        "request_rate": settings.request_rate.to_json(),
        "burstiness": settings.burstiness,
        "max_concurrency": settings.max_concurrency,
        "duration": result.duration_s,
        "completed": result.completed,
        "failed": result.failed,
        "total_input_tokens": result.total_input_tokens,
        "total_output_tokens": result.total_output_tokens,
        "request_throughput": result.request_throughput,
        "request_goodput": result.request_goodput,
        "output_throughput": result.output_throughput,
        "total_token_throughput": result.total_token_throughput,
        "max_concurrent_requests": result.max_concurrent_requests,
        "input_lens": result.input_lens,
        "output_lens": result.output_lens,
        "ttfts": result.ttfts_s,
        "itls": result.itls_s,
        "sent_s": result.sent_s,
        "finished_s": result.finished_s,
        "errors": result.errors,
        "client_cpu_time_s": result.client_cpu_s,
    });
    let map = fields.as_object_mut().expect("built as an object");
    if settings.burstiness == f64::INFINITY {
        // JSON has no infinity; "inf" as for the request rate.
        map.insert("burstiness".into(), json!("inf"));
    }
    for (key, _, _, distribution) in latency_sections(result) {
        insert_distribution(map, key, distribution);
    }
    if let Some(stats) = &result.spec_decode {
        map.insert("spec_decode".into(), stats.to_json());
    }
    if !result.by_class.is_empty() {
        map.insert(
            "long_prompt_threshold".into(),
            json!(settings.long_prompt_threshold),
        );
        map.insert(
            "ttft_by_class".into(),
            by_class(&result.by_class, |c| &c.ttft),
        );
        map.insert(
            "e2el_by_class".into(),
            by_class(&result.by_class, |c| &c.e2el),
        );
    }
    fields
}

/// `{"short": {...}, "long": {...}}`: per class its request counts and one metric's summary.
fn by_class(classes: &[ClassLatencies], metric: fn(&ClassLatencies) -> &Distribution) -> Value {
    let mut map = Map::new();
    for class in classes {
        let distribution = metric(class);
        let mut fields = Map::new();
        fields.insert("requests".into(), json!(class.requests));
        fields.insert("completed".into(), json!(class.completed));
        fields.insert("mean_ms".into(), json!(distribution.mean));
        fields.insert("median_ms".into(), json!(distribution.median));
        fields.insert("std_ms".into(), json!(distribution.std));
        for (p, value) in &distribution.percentiles {
            fields.insert(format!("p{}_ms", percentile_label(*p)), json!(value));
        }
        fields.insert("max_ms".into(), json!(distribution.max));
        map.insert(class.class.name().into(), Value::Object(fields));
    }
    Value::Object(map)
}

fn insert_distribution(map: &mut Map<String, Value>, key: &str, distribution: &Distribution) {
    map.insert(format!("mean_{key}_ms"), json!(distribution.mean));
    map.insert(format!("median_{key}_ms"), json!(distribution.median));
    map.insert(format!("std_{key}_ms"), json!(distribution.std));
    for (p, value) in &distribution.percentiles {
        map.insert(format!("p{}_{key}_ms", percentile_label(*p)), json!(value));
    }
}

pub fn save_json(value: &Value, path: &Path) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// `YYYYMMDD-HHMMSS` in UTC, the shape vllm uses for its `date` field.
fn utc_timestamp(now: std::time::SystemTime) -> String {
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_date(days as i64);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Gregorian date of a day count since 1970-01-01 (Howard Hinnant's days-to-civil method).
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "19700101-000000");
        // 2024-02-29 12:34:56 UTC, a leap day.
        assert_eq!(
            utc_timestamp(UNIX_EPOCH + Duration::from_secs(1_709_210_096)),
            "20240229-123456"
        );
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use crate::report::benchmark_result::tests::sample;

    #[test]
    fn table_has_vllm_layout_with_aligned_values() {
        let mut result = sample(&["ttft:150"]);
        result.client_cpu_s = Some(0.25);
        let table = table(&result);
        assert!(table.starts_with("============ Serving Benchmark Result ============\n"));
        for expected in [
            "Successful requests:                    2         \n",
            "Benchmark duration (s):                 1.00      \n",
            "Output token throughput (tok/s):        4.00      \n",
            "Request goodput (req/s):                1.00      \n",
            "Peak concurrent requests:               3         \n",
            "Total Token throughput (tok/s):         24.00     \n",
            "---------------Time to First Token----------------\n",
            "-----Time per Output Token (excl. 1st token)------\n",
            "---------------Inter-token Latency----------------\n",
            "P99 ITL (ms):                           50.00     \n",
            "Median TTFT (ms):                       200.00    \n",
            "Client CPU time (s):                    0.25      \n",
        ] {
            assert!(table.contains(expected), "missing {expected:?} in\n{table}");
        }
    }

    #[test]
    fn json_uses_vllm_field_names_with_one_key_per_percentile() {
        let json = to_json(&sample(&[]));
        for key in [
            "date",
            "backend",
            "model_id",
            "num_prompts",
            "request_rate",
            "burstiness",
            "max_concurrency",
            "duration",
            "completed",
            "failed",
            "total_input_tokens",
            "total_output_tokens",
            "request_throughput",
            "request_goodput",
            "output_throughput",
            "total_token_throughput",
            "max_concurrent_requests",
            "input_lens",
            "output_lens",
            "ttfts",
            "itls",
            "sent_s",
            "finished_s",
            "errors",
            "mean_ttft_ms",
            "median_ttft_ms",
            "std_ttft_ms",
            "p50_ttft_ms",
            "p99_ttft_ms",
            "mean_tpot_ms",
            "p99_tpot_ms",
            "mean_itl_ms",
            "p99_itl_ms",
            "mean_e2el_ms",
            "p99_e2el_ms",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        assert_eq!(json["request_rate"], "inf");
        assert_eq!(json["ttfts"][0], 0.1);
        assert_eq!(json["itls"][0], serde_json::json!([0.05, 0.05]));
        assert!(json.get("ttft_by_class").is_none(), "one class only");
        assert!(!table(&sample(&[])).contains("Prompt Length"));
    }

    /// The sample with its first request (TTFT 100) short and its second (TTFT and E2EL
    /// 300) long.
    fn two_class_sample() -> BenchmarkResult {
        use crate::report::prompt_class::PromptClass;
        let mut result = sample(&[]);
        result.settings.long_prompt_threshold = 8000;
        let class = |class, ttft: f64, e2el: f64| ClassLatencies {
            class,
            requests: 1,
            completed: 1,
            ttft: Distribution::of(&[ttft], &[50.0, 99.0]),
            e2el: Distribution::of(&[e2el], &[50.0, 99.0]),
        };
        result.by_class = vec![
            class(PromptClass::Short, 100.0, 200.0),
            class(PromptClass::Long, 300.0, 300.0),
        ];
        result
    }

    #[test]
    fn two_classes_give_per_class_json_and_table_lines() {
        let result = two_class_sample();
        let json = to_json(&result);
        assert_eq!(json["long_prompt_threshold"], 8000);
        for key in ["ttft_by_class", "e2el_by_class"] {
            for class in ["short", "long"] {
                for field in [
                    "requests",
                    "completed",
                    "mean_ms",
                    "median_ms",
                    "std_ms",
                    "p50_ms",
                    "p99_ms",
                    "max_ms",
                ] {
                    assert!(
                        json[key][class].get(field).is_some(),
                        "missing {key}.{class}.{field} in {json}"
                    );
                }
            }
        }
        assert_eq!(json["ttft_by_class"]["long"]["max_ms"], 300.0);
        assert_eq!(json["ttft_by_class"]["short"]["median_ms"], 100.0);
        let table = table(&result);
        for expected in [
            "-------------Latency by Prompt Length-------------\n",
            "Long prompts from (tokens):             8000      \n",
            "Requests short (completed):             1 (1)     \n",
            "Median TTFT short (ms):                 100.00    \n",
            "P99 TTFT long (ms):                     300.00    \n",
            "Max E2EL long (ms):                     300.00    \n",
        ] {
            assert!(table.contains(expected), "missing {expected:?} in\n{table}");
        }
    }

    #[test]
    fn spec_decode_figures_appear_in_table_and_json_only_when_reported() {
        use crate::report::spec_decode_report::{SpecDecodeCounters, SpecDecodeReport};
        let plain = sample(&[]);
        assert!(to_json(&plain).get("spec_decode").is_none());
        assert!(!table(&plain).contains("Speculative"));

        let mut result = sample(&[]);
        let after = SpecDecodeCounters {
            num_drafts: 20,
            num_draft_tokens: 80,
            num_accepted_tokens: 50,
            accepted_per_pos: vec![18, 14, 10, 8],
        };
        result.spec_decode = Some(SpecDecodeReport::from_counters(
            &SpecDecodeCounters::default(),
            &after,
        ));
        let json = to_json(&result);
        let spec = &json["spec_decode"];
        assert_eq!(spec["num_drafts"], 20);
        assert_eq!(spec["num_draft_tokens"], 80);
        assert_eq!(spec["num_accepted_tokens"], 50);
        assert_eq!(spec["acceptance_rate"], 0.625);
        assert_eq!(spec["mean_acceptance_length"], 3.5);
        assert_eq!(spec["accepted_per_pos"], serde_json::json!([18, 14, 10, 8]));
        let table = table(&result);
        for expected in [
            "---------------Speculative Decoding---------------\n",
            "Drafts:                                 20        \n",
            "Draft acceptance rate (%):              62.50     \n",
            "Mean acceptance length:                 3.50      \n",
            "Acceptance rate per position:           0.90 0.70 0.50 0.40\n",
        ] {
            assert!(table.contains(expected), "missing {expected:?} in\n{table}");
        }

        let long = SpecDecodeCounters {
            num_drafts: 2,
            num_draft_tokens: 128,
            num_accepted_tokens: 64,
            accepted_per_pos: vec![1; 64],
        };
        result.spec_decode = Some(SpecDecodeReport::from_counters(
            &SpecDecodeCounters::default(),
            &long,
        ));
        assert!(crate::report::serve_report::table(&result).contains(
            "Acceptance rate per position:           \
             0.50 0.50 0.50 0.50 0.50 0.50 0.50 0.50 … (64 positions)\n"
        ));
        assert_eq!(
            to_json(&result)["spec_decode"]["accepted_per_pos"]
                .as_array()
                .map(Vec::len),
            Some(64)
        );
    }

    #[test]
    fn infinite_burstiness_is_saved_as_inf() {
        let mut result = sample(&[]);
        result.settings.burstiness = f64::INFINITY;
        assert_eq!(to_json(&result)["burstiness"], "inf");
        assert_eq!(to_json(&sample(&[]))["burstiness"], 1.0);
    }
}
