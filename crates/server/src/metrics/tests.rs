//! Unit tests of `metrics/mod.rs`, kept beside it so the module itself stays readable.

use super::*;
use std::time::Duration;

fn timings(tokens: &[u64]) -> RequestTimings {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    RequestTimings {
        arrival: start,
        first_scheduled: Some(at(10)),
        first_token: Some(at(tokens[0])),
        token_times: tokens.iter().map(|&ms| at(ms)).collect(),
        finished: Some(at(*tokens.last().unwrap())),
    }
}

#[test]
fn a_finished_request_fills_every_histogram_and_counter() {
    let metrics = Metrics::new("m");
    let t = timings(&[50, 70, 90]);
    metrics.record(FinishedRequest {
        reason: "length",
        prompt_tokens: 5,
        completion_tokens: 3,
        timings: Some(&t),
    });
    let text = metrics.render(&SchedulerStats::default());
    assert_eq!(
        sample_value(&text, "tokenmill:prompt_tokens_total"),
        Some(5.0)
    );
    assert_eq!(
        sample_value(&text, "tokenmill:generation_tokens_total"),
        Some(3.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "tokenmill:request_success_total{model_name=\"m\",finished_reason=\"length\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample_value(&text, "tokenmill:inter_token_latency_seconds_count"),
        Some(2.0)
    );
    let ttft = sample_value(&text, "tokenmill:time_to_first_token_seconds_sum").unwrap();
    assert!((ttft - 0.05).abs() < 1e-9, "{ttft}");
    let tpot = sample_value(&text, "tokenmill:request_time_per_output_token_seconds_sum").unwrap();
    assert!((tpot - 0.02).abs() < 1e-9, "{tpot}");
    let queue = sample_value(&text, "tokenmill:request_queue_time_seconds_sum").unwrap();
    assert!((queue - 0.01).abs() < 1e-9, "{queue}");
}

#[test]
fn buckets_are_cumulative_and_end_at_the_count() {
    let mut h = Histogram::new(&[0.1, 1.0]);
    for s in [0.05, 0.5, 0.7, 5.0] {
        h.observe(s);
    }
    let mut out = String::new();
    let spec = HistogramSpec {
        name: "x",
        help: "h",
        buckets: &[0.1, 1.0],
    };
    histogram_family(&mut out, NATIVE, &spec, &h, "model_name=\"m\"");
    assert!(out.contains("tokenmill:x_bucket{model_name=\"m\",le=\"0.1\"} 1\n"));
    assert!(out.contains("tokenmill:x_bucket{model_name=\"m\",le=\"1\"} 3\n"));
    assert!(out.contains("tokenmill:x_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"));
}

fn config() -> ServingConfig {
    ServingConfig {
        model_path: None,
        block_size: 16,
        num_kv_blocks: 512,
        kv_capacity: tokenmill_engine::config::KvCapacity {
            num_pages: 512,
            short_context: 512 * 16,
            one_sequence: 512 * 16,
        },
        max_model_len: 2048,
        max_num_seqs: 256,
        max_num_batched_tokens: 2048,
        enable_prefix_caching: true,
        kv_cache_dtype: "float16",
        cpu_kernel: "avx512_vnni",
    }
}

#[test]
fn vllm_compat_adds_vllm_names_with_the_same_values_and_the_info_gauges() {
    let stats = SchedulerStats {
        num_running: 3,
        num_waiting: 2,
        kv_cache_usage: 0.5,
        prefix_cache_queries: 100,
        prefix_cache_hits: 40,
        disk_cache_queries: 100,
        disk_cache_hits: 32,
        ..Default::default()
    };
    let native = Metrics::new("m")
        .with_compat(None, &config())
        .render(&stats);
    assert!(!native.contains("vllm:"), "{native}");
    assert!(native.contains("tokenmill:cache_config_info{block_size=\"16\","));
    assert!(native.contains("tokenmill:cpu_kernel_info{kernel=\"avx512_vnni\"} 1\n"));
    let metrics = Metrics::new("m").with_compat(Some(MetricsCompat::Vllm), &config());
    let t = timings(&[50, 70, 90]);
    metrics.record(FinishedRequest {
        reason: "stop",
        prompt_tokens: 5,
        completion_tokens: 3,
        timings: Some(&t),
    });
    let text = metrics.render(&stats);
    for (series, value) in [
        ("vllm:num_requests_running", 3.0),
        ("vllm:num_requests_waiting", 2.0),
        ("vllm:kv_cache_usage_perc", 0.5),
        ("vllm:gpu_cache_usage_perc", 0.5),
        ("vllm:prefix_cache_queries_total", 100.0),
        ("vllm:gpu_prefix_cache_hits_total", 40.0),
        ("vllm:external_prefix_cache_queries_total", 100.0),
        ("vllm:external_prefix_cache_hits_total", 32.0),
        ("vllm:prompt_tokens_total", 5.0),
        ("vllm:time_to_first_token_seconds_count", 1.0),
        ("vllm:time_per_output_token_seconds_count", 2.0),
        ("tokenmill:num_requests_running", 3.0),
    ] {
        assert_eq!(sample_value(&text, series), Some(value), "{series}");
    }
    let cache = text
        .lines()
        .find(|l| l.starts_with("vllm:cache_config_info{"))
        .expect("cache_config_info");
    assert!(cache.contains("block_size=\"16\""), "{cache}");
    assert!(cache.contains("num_gpu_blocks=\"512\""), "{cache}");
    assert!(cache.ends_with("} 1"), "{cache}");
    let lora = text
        .lines()
        .find(|l| l.starts_with("vllm:lora_requests_info{"))
        .expect("lora_requests_info");
    assert!(lora.contains("running_lora_adapters=\"\""), "{lora}");
    // tokenmill's own series have no vLLM name.
    assert!(!text.contains("vllm:step_time_seconds"), "{text}");
    assert!(!text.contains("vllm:requests_refused_total"), "{text}");
}

#[test]
fn the_kv_pool_reports_its_pages_and_its_capacity_at_short_context_and_for_one_sequence() {
    let mut config = config();
    config.kv_capacity = tokenmill_engine::config::KvCapacity {
        num_pages: 512,
        short_context: 1360,
        one_sequence: 5000,
    };
    let text = Metrics::new("m")
        .with_compat(Some(MetricsCompat::Vllm), &config)
        .render(&SchedulerStats::default());
    assert!(
        text.contains("tokenmill:kv_cache_blocks{model_name=\"m\"} 512\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "tokenmill:kv_cache_capacity_tokens{model_name=\"m\",context=\"short\"} 1360\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "tokenmill:kv_cache_capacity_tokens{model_name=\"m\",context=\"one_sequence\"} 5000\n"
        ),
        "{text}"
    );
    assert!(
        !text.contains("vllm:kv_cache_capacity_tokens"),
        "vLLM has no such series"
    );
}

#[test]
fn gauges_come_from_the_scheduler_and_labels_are_escaped() {
    let stats = SchedulerStats {
        num_running: 2,
        kv_cache_usage: 0.25,
        ..Default::default()
    };
    let text = Metrics::new("a\"b").render(&stats);
    assert_eq!(
        sample_value(&text, "tokenmill:num_requests_running"),
        Some(2.0)
    );
    assert_eq!(
        sample_value(&text, "tokenmill:kv_cache_usage_perc"),
        Some(0.25)
    );
    assert!(text.contains("model_name=\"a\\\"b\""));
}

#[test]
fn moe_active_experts_is_a_histogram_only_for_a_mixture_of_experts_model() {
    let dense = Metrics::new("m").render(&SchedulerStats::default());
    assert!(!dense.contains("moe_active_experts"), "{dense}");
    let mut moe = tokenmill_engine::sched::moe_expert_stats::MoeExpertStats::new(8);
    moe.observe(2.0);
    moe.observe(5.5);
    let stats = SchedulerStats {
        moe_active_experts: Some(moe),
        ..Default::default()
    };
    let text = Metrics::new("m").render(&stats);
    assert_eq!(
        sample_value(&text, "tokenmill:moe_active_experts_count"),
        Some(2.0)
    );
    assert_eq!(
        sample_value(&text, "tokenmill:moe_active_experts_sum"),
        Some(7.5)
    );
    assert!(text.contains("tokenmill:moe_active_experts_bucket{model_name=\"m\",le=\"2\"} 1\n"));
    assert!(text.contains("tokenmill:moe_active_experts_bucket{model_name=\"m\",le=\"8\"} 2\n"));
}
