//! `bench latency` on the real model: it runs, and sets its decode step against the bytes the
//! step reads, which must be the file's projection and output weights exactly.

use candle_core::quantized::gguf_file::Content;
use std::process::Command;

/// Bytes of every matrix in the file: each layer's projections and the (tied) output table,
/// which a one-sequence decode step streams once; norms are vectors and left out.
fn matrix_bytes_in_file(path: &std::path::Path) -> usize {
    let mut file = std::fs::File::open(path).expect("the model opens");
    let content = Content::read(&mut file).expect("the model is a GGUF");
    content
        .tensor_infos
        .values()
        .filter(|info| info.shape.dims().len() == 2)
        .map(|info| {
            info.shape.elem_count() / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()
        })
        .sum()
}

#[test]
fn bench_latency_reports_decode_against_the_bytes_a_step_reads() {
    let model = tokenmill_server::model_loader::default_model_path();
    assert!(
        model.exists(),
        "the default model {} is missing: run scripts/fetch-model.sh",
        model.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(["bench", "latency", "--input-len", "16", "--output-len", "8"])
        .args(["--num-iters", "1", "--num-kv-blocks", "64", "--model"])
        .arg(&model)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("decode roofline: a step reads "))
        .unwrap_or_else(|| panic!("no roofline line in:\n{stdout}"));
    let reported_mb: f64 = line["decode roofline: a step reads ".len()..]
        .split_whitespace()
        .next()
        .and_then(|mb| mb.parse().ok())
        .unwrap_or_else(|| panic!("no MB figure in {line:?}"));
    let expected_mb = matrix_bytes_in_file(&model) as f64 / 1e6;
    assert!(
        (reported_mb - expected_mb).abs() <= 0.05,
        "reported {reported_mb} MB, the file's matrices hold {expected_mb:.2} MB"
    );
    assert!(line.contains("GB/s") && line.ends_with("% of it"), "{line}");
}

#[test]
fn bench_latency_with_one_output_token_says_there_was_no_decode_step() {
    let model = tokenmill_server::model_loader::default_model_path();
    assert!(
        model.exists(),
        "the default model {} is missing",
        model.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(["bench", "latency", "--input-len", "16", "--output-len", "1"])
        .args(["--num-iters", "1", "--num-kv-blocks", "64", "--model"])
        .arg(&model)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("model "))
        .unwrap_or_else(|| panic!("no summary line in:\n{stdout}"));
    assert!(
        summary.ends_with("no decode steps (one output token)"),
        "{summary}"
    );
    assert!(
        !stdout.contains("inf"),
        "a rate divided by no steps:\n{stdout}"
    );
    assert!(!stdout.contains("decode roofline"), "{stdout}");
}
