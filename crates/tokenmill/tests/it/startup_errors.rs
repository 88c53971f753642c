//! A bad flag or a bad model file stops `tokenmill serve` (and `generate` and the engine
//! benches, which take the same engine flags) with one line on stderr naming
//! what is wrong and exit status 1: no panic, no backtrace, no hang. That includes a model
//! whose weights hold NaN or infinite values: refused by tensor name, never served.

use std::path::PathBuf;
use std::process::Command;

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::GgmlDType;

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
    assert_one_line_error(
        &["serve", "--load-format", "pt", "--port", "0"],
        "--load-format pt: must be auto or dummy",
    );
}

/// `--tokenizer`, `--chat-template` and `--generation-config` name files; a wrong one is
/// refused at startup by its flag, never found out by a request.
#[test]
fn each_bad_text_flag_is_one_line_naming_the_flag_and_exit_status_1() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--chat-template", "no/such/template.jinja"],
            "--chat-template no/such/template.jinja: no such file",
        ),
        (
            &["--tokenizer", "no/such/tokenizer.json"],
            "--tokenizer no/such/tokenizer.json",
        ),
        (
            &["--generation-config", "no/such/folder"],
            "--generation-config no/such/folder: there is no generation_config.json",
        ),
        (
            &["--chat-template", "{{ messages }}"],
            "--chat-template needs a tokenizer",
        ),
    ];
    for (flag, expected) in cases {
        let args = serve_dummy_with(flag);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_one_line_error(&args, expected);
    }
}

/// `generate` and the engine benches take the same engine flags, checked by the same step.
#[test]
fn each_bad_flag_of_a_server_of_several_models_is_one_line_naming_what_is_wrong() {
    let two = ["serve", "--model", "a=a.gguf", "--model", "b=b.gguf"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["--model-flags", "b=--max-model-len many"],
            "--model-flags of `b`: invalid value 'many' for '--max-model-len",
        ),
        (
            &["--model-flags", "b=--port 9000"],
            "--model-flags of `b`: unexpected argument '--port'",
        ),
        (
            &["--model-flags", "c=--max-model-len 64"],
            "--model-flags names `c`, which is not a model served here (`a`, `b`)",
        ),
        (
            &["--served-model-name", "x"],
            "name each as --model NAME=PATH_OR_REPO",
        ),
        (
            &["--kv-events-config", r#"{"enable_kv_cache_events": true}"#],
            "run a server per model",
        ),
    ];
    for (extra, expected) in cases {
        let args: Vec<&str> = two.iter().chain(extra.iter()).copied().collect();
        assert_one_line_error(&args, expected);
    }
    assert_one_line_error(&["serve", "--models-max", "2"], "no model to serve");
    // Refused by clap as it reads the flags: its usage error, exit status 2.
    for (extra, expected) in [
        (
            ["--model-flags", "b='--max-model-len 64"],
            "the flags of `b` have an unclosed quote",
        ),
        (
            ["--models-memory-gib", "0"],
            "`0` is not a positive number of GiB",
        ),
    ] {
        let args: Vec<&str> = two.iter().chain(extra.iter()).copied().collect();
        let (code, stderr) = tokenmill(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn generate_and_the_engine_benches_refuse_a_bad_engine_flag_in_one_line_too() {
    let dummy = ["--load-format", "dummy", "--model", "smollm2-135m"];
    let commands: [&[&str]; 3] = [
        &["generate", "--prompt", "hello"],
        &["bench", "latency"],
        &["bench", "throughput"],
    ];
    for command in commands {
        let args: Vec<&str> = [command, &dummy, &["--threads", "0"]].concat();
        assert_one_line_error(&args, "--threads 0: must be at least 1");
        let args: Vec<&str> = [command, &dummy, &["--kv-cache-memory-gib", "inf"]].concat();
        assert_one_line_error(&args, "--kv-cache-memory-gib inf: must be a finite number");
    }
}

#[test]
fn a_missing_default_model_is_one_line_saying_how_to_fetch_it() {
    let missing = std::env::temp_dir().join("tokenmill-startup-no-such-model.gguf");
    let output = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(["serve", "--port", "0"])
        .env("TOKENMILL_MODEL", &missing)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: ")
            && lines[0].contains("default model not found: run scripts/fetch-model.sh"),
        "{stderr}"
    );
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
    crate::common::skip_without_model!();
    let model = tokenmill_server::model::model_loader::default_model_path();
    let bytes = std::fs::read(&model)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-model.sh", model.display()));
    let path = temp_model("cut-off.gguf", &bytes[..bytes.len() / 2]);
    let path = path.to_str().unwrap();
    assert_one_line_error(&["serve", "--model", path, "--port", "0"], path);
}

/// `serve` on dummy weights with `TOKENMILL_CPU_KERNEL=kernel`, which must stop it with one
/// line and status 1: that line.
fn one_line_kernel_error(kernel: &str) -> String {
    let args = serve_dummy_with(&[]);
    let output = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(&args)
        .env("TOKENMILL_CPU_KERNEL", kernel)
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(lines.len(), 1, "{stderr}");
    lines[0].to_owned()
}

#[test]
fn an_unknown_or_unsupported_cpu_kernel_is_one_line_naming_the_variable() {
    let line = one_line_kernel_error("avx9000");
    assert!(
        line.starts_with("error: ") && line.contains("TOKENMILL_CPU_KERNEL"),
        "{line}"
    );
}

/// `TOKENMILL_CPU_KERNEL=amx_int8` runs where the AMX probe passed, and elsewhere stops the
/// program with one line that says why (CPUID, the OS, the kernel's permission, or a trap).
#[test]
fn forcing_amx_where_it_cannot_run_is_one_line_saying_why() {
    use tokenmill_engine::kernels::cpu_kernel::CpuKernel;
    if CpuKernel::Amx.is_supported() {
        println!("SKIPPED: this CPU runs amx_int8, so forcing it is no error");
        return;
    }
    let why = CpuKernel::amx_unavailable().expect("AMX is unavailable here");
    let line = one_line_kernel_error("amx_int8");
    assert!(line.contains("amx_int8") && line.contains(&why), "{line}");
}

/// The default model with one value overwritten: `bytes` at byte `at` of tensor `name`'s data.
/// Returns the tensor's type too, so a test can pick where the value goes.
fn model_with_value(name: &str, at: impl Fn(GgmlDType) -> usize, bytes: &[u8]) -> Vec<u8> {
    let model = tokenmill_server::model::model_loader::default_model_path();
    let mut file = std::fs::read(&model)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-model.sh", model.display()));
    let content = Content::read(&mut std::io::Cursor::new(&file)).unwrap();
    let info = &content.tensor_infos[name];
    let start = content.tensor_data_offset as usize + info.offset as usize + at(info.ggml_dtype);
    file[start..start + bytes.len()].copy_from_slice(bytes);
    file
}

#[test]
fn a_model_with_a_nan_in_a_quantized_block_scale_is_refused_naming_the_tensor() {
    crate::common::skip_without_model!();
    // Block 5's scale `d` (the first f16 of every Q4_0/Q4_1/Q8_0 block): an f16 NaN.
    let block_start = |dtype: GgmlDType| match dtype {
        GgmlDType::Q4_0 => 5 * 18,
        GgmlDType::Q4_1 => 5 * 20,
        GgmlDType::Q8_0 => 5 * 34,
        other => panic!("blk.0.attn_q.weight is {other:?} in the default model"),
    };
    let bytes = model_with_value("blk.0.attn_q.weight", block_start, &[0x00, 0x7e]);
    let path = temp_model("nan-scale.gguf", &bytes);
    let path = path.to_str().unwrap();
    assert_one_line_error(
        &["serve", "--model", path, "--port", "0"],
        "tensor blk.0.attn_q.weight holds NaN or infinite values (first at the scale of block 5)",
    );
}

#[test]
fn a_model_with_an_infinite_float_weight_is_refused_naming_the_tensor() {
    crate::common::skip_without_model!();
    let element_7 = |dtype: GgmlDType| {
        assert_eq!(
            dtype,
            GgmlDType::F32,
            "output_norm.weight is f32 in the default model"
        );
        7 * 4
    };
    let bytes = model_with_value(
        "output_norm.weight",
        element_7,
        &f32::INFINITY.to_le_bytes(),
    );
    let path = temp_model("inf-norm.gguf", &bytes);
    let path = path.to_str().unwrap();
    assert_one_line_error(
        &["serve", "--model", path, "--port", "0"],
        "tensor output_norm.weight holds NaN or infinite values (first at element 7)",
    );
}
