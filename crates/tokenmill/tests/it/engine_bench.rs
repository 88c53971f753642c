//! `bench latency` on the real model: it runs, and sets its decode step against the bytes the
//! step reads and its prefill against the int8 peak, counting the file's weights exactly.

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

/// `bench latency` on the default model (16 prompt tokens, one measured run): the model's
/// path and what the command printed.
fn bench_latency(output_len: &str) -> (std::path::PathBuf, String) {
    let model = tokenmill_server::model::model_loader::default_model_path();
    assert!(
        model.exists(),
        "the default model {} is missing: run scripts/fetch-model.sh",
        model.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args([
            "bench",
            "latency",
            "--input-len",
            "16",
            "--output-len",
            output_len,
        ])
        .args(["--num-iters", "1", "--num-kv-blocks", "64", "--model"])
        .arg(&model)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (model, stdout)
}

/// The first line of `out` that starts with `prefix`.
fn line_starting<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{out}"))
}

/// The number that follows `prefix` at the start of `line`.
fn figure_after(line: &str, prefix: &str) -> f64 {
    line.strip_prefix(prefix)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|figure| figure.parse().ok())
        .unwrap_or_else(|| panic!("no figure after {prefix:?} in {line:?}"))
}

#[test]
fn bench_latency_reports_decode_against_the_bytes_a_step_reads() {
    crate::common::skip_without_model!();
    let (model, stdout) = bench_latency("8");
    let line = line_starting(&stdout, "decode roofline: ");
    let reported_mb = figure_after(line, "decode roofline: a step reads ");
    let expected_mb = matrix_bytes_in_file(&model) as f64 / 1e6;
    assert!(
        (reported_mb - expected_mb).abs() <= 0.05,
        "reported {reported_mb} MB, the file's matrices hold {expected_mb:.2} MB"
    );
    assert!(line.contains("GB/s") && line.ends_with("% of it"), "{line}");
}

/// Operations (a multiply and an add each) of one prompt token's matmuls as the file's shapes
/// give them: Q/K/V in every layer, o_proj and the MLP in every layer but the last (which
/// runs them only for rows that sample).
fn prompt_token_ops_in_file(path: &std::path::Path) -> usize {
    let mut file = std::fs::File::open(path).expect("the model opens");
    let content = Content::read(&mut file).expect("the model is a GGUF");
    let layer = |name: &str| {
        name.strip_prefix("blk.")?
            .split('.')
            .next()?
            .parse::<usize>()
            .ok()
    };
    let last = content
        .tensor_infos
        .keys()
        .filter_map(|n| layer(n))
        .max()
        .expect("layers");
    let multiply_adds: usize = content
        .tensor_infos
        .iter()
        .filter(|(name, info)| {
            let per_token = ["attn_q.", "attn_k.", "attn_v."]
                .iter()
                .any(|p| name.contains(p));
            let before_last = ["attn_output.", "ffn_gate.", "ffn_up.", "ffn_down."]
                .iter()
                .any(|p| name.contains(p))
                && layer(name) != Some(last);
            info.shape.dims().len() == 2 && (per_token || before_last)
        })
        .map(|(_, info)| info.shape.elem_count())
        .sum();
    2 * multiply_adds
}

#[test]
fn bench_latency_of_a_prompt_alone_has_no_decode_step_and_sets_prefill_against_the_int8_peak() {
    crate::common::skip_without_model!();
    let (model, stdout) = bench_latency("1");
    let summary = line_starting(&stdout, "model ");
    assert!(
        summary.ends_with("no decode steps (one output token)"),
        "{summary}"
    );
    assert!(
        !stdout.contains("inf"),
        "a rate divided by no steps:\n{stdout}"
    );
    assert!(!stdout.contains("decode roofline"), "{stdout}");
    // Where the kernel path has an int8 probe, the prefill is set against it, counting the
    // file's matmul shapes.
    let probed = tokenmill_engine::kernels::int8_probe::Int8Probe::for_kernel(
        tokenmill_engine::kernels::cpu_kernel::CpuKernel::active(),
    )
    .is_some();
    let line = stdout.lines().find(|l| l.starts_with("prefill roofline: "));
    assert_eq!(line.is_some(), probed, "{stdout}");
    if let Some(line) = line {
        let gop = figure_after(line, "prefill roofline: a prompt token's matmuls are ");
        let expected = prompt_token_ops_in_file(&model) as f64 / 1e9;
        assert!(
            (gop - expected).abs() <= 0.0005,
            "{gop} GOP, the file's shapes give {expected}"
        );
        assert!(
            line.contains("% of the ") && line.ends_with("read just after"),
            "{line}"
        );
    }
}
