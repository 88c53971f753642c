//! A bad flag or a bad model file stops `tokenmill serve` with one line on stderr naming
//! what is wrong and exit status 1: no panic, no backtrace, no hang.

use std::path::PathBuf;
use std::process::Command;

/// Runs the binary and returns its exit code and stderr.
fn tokenmill(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(args)
        // Backtraces on: they must still not reach the operator for a bad flag or file.
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_one_line_error(args: &[&str], expected: &str) {
    let (code, stderr) = tokenmill(args);
    assert_eq!(code, Some(1), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?} printed more than one line:\n{stderr}"
    );
    assert!(lines[0].starts_with("error: "), "{args:?}: {stderr}");
    assert!(lines[0].contains(expected), "{args:?}: {stderr}");
}

/// Dummy weights need no model file, and a bad flag is refused before any weight is made.
fn serve_dummy_with(flag: &[&str]) -> Vec<String> {
    [
        "serve",
        "--load-format",
        "dummy",
        "--model",
        "smollm2-135m",
        "--port",
        "0",
    ]
    .iter()
    .chain(flag)
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn each_bad_engine_flag_is_one_line_naming_the_flag_and_exit_status_1() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--block-size", "0"],
            "--block-size 0: must be a power of two",
        ),
        (
            &["--block-size", "12"],
            "--block-size 12: must be a power of two",
        ),
        (
            &["--max-num-batched-tokens", "0"],
            "--max-num-batched-tokens 0: must be at least 1",
        ),
        (
            &["--max-num-batched-tokens", "64"],
            "at least max_num_seqs (128)",
        ),
        (
            &["--max-num-seqs", "0"],
            "--max-num-seqs 0: must be at least 1",
        ),
        (
            &["--long-prefill-token-threshold", "0"],
            "--long-prefill-token-threshold 0",
        ),
        (
            &["--num-kv-blocks", "0"],
            "--num-kv-blocks 0: the KV cache must hold at least one block",
        ),
        (
            &["--kv-cache-memory-gib", "inf"],
            "--kv-cache-memory-gib inf: must be a finite number",
        ),
        (
            &["--kv-cache-memory-gib", "NaN"],
            "--kv-cache-memory-gib NaN: must be a finite number",
        ),
        (
            &["--kv-cache-memory-gib=-1"],
            "--kv-cache-memory-gib -1: must be a finite number",
        ),
        (
            &["--kv-cache-memory-gib", "100000"],
            "does not fit in this machine's",
        ),
        (
            &["--kv-cache-memory-gib", "0.0000001"],
            "--kv-cache-memory-gib 0.0000001: the KV cache must hold at least one block",
        ),
        (
            &["--max-model-len", "1"],
            "--max-model-len 1: must be at least 2",
        ),
        (
            &["--max-model-len", "99999999"],
            "exceeds the model's context length",
        ),
        (&["--threads", "0"], "--threads 0: must be at least 1"),
    ];
    for (flag, expected) in cases {
        let args = serve_dummy_with(flag);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_one_line_error(&args, expected);
    }
}

fn temp_model(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenmill-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A GGUF v3 header claiming `tensors` tensors and `kvs` metadata pairs, and nothing else.
fn gguf_header(tensors: u64, kvs: u64) -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(tensors.to_le_bytes());
    bytes.extend(kvs.to_le_bytes());
    bytes
}

#[test]
fn each_bad_model_file_is_one_line_naming_the_file_and_exit_status_1() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty.gguf", Vec::new()),
        (
            "garbage.gguf",
            (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect(),
        ),
        ("wrong-magic.gguf", [b"GGML".as_slice(), &[0; 64]].concat()),
        ("header-only.gguf", gguf_header(0, 0)),
        ("huge-counts.gguf", gguf_header(u64::MAX / 2, u64::MAX / 2)),
        ("truncated.gguf", gguf_header(3, 5)),
    ];
    for (name, bytes) in cases {
        let path = temp_model(name, &bytes);
        let path = path.to_str().unwrap();
        assert_one_line_error(&["serve", "--model", path, "--port", "0"], path);
    }
}

#[test]
fn a_real_model_cut_off_inside_its_tensor_data_is_refused_in_one_line() {
    let model = tokenmill_server::model_loader::default_model_path();
    let bytes = std::fs::read(&model)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-model.sh", model.display()));
    let path = temp_model("cut-off.gguf", &bytes[..bytes.len() / 2]);
    let path = path.to_str().unwrap();
    assert_one_line_error(&["serve", "--model", path, "--port", "0"], path);
}

#[test]
fn an_unknown_or_unsupported_cpu_kernel_is_one_line_naming_the_variable() {
    let args = serve_dummy_with(&[]);
    let output = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(&args)
        .env("TOKENMILL_CPU_KERNEL", "avx9000")
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains("TOKENMILL_CPU_KERNEL"),
        "{stderr}"
    );
}
