//! `tokenmill perplexity` end to end: the default model (SmolLM2-135M, real weights) scores the
//! opening of *Alice's Adventures in Wonderland*, the zoo's random tiny-llama3 scores it on the
//! f32 path, and a text too short for two chunks is refused.

use std::path::PathBuf;
use std::process::Command;

fn alice() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/texts/alice-chapters-1-4.txt")
}

/// Runs `tokenmill perplexity` with `args`: the exit code, stdout, stderr.
fn perplexity(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .arg("perplexity")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `Final estimate: PPL = X +/- E` line's X.
fn final_estimate(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("no final estimate in {stdout}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_default_model_finds_english_prose_far_from_random() {
    crate::common::skip_without_model!();
    let model = tokenmill_server::model::model_loader::default_model_path();
    assert!(
        model.exists(),
        "the default model {} is missing: run scripts/fetch-model.sh",
        model.display()
    );
    let (code, stdout, stderr) = perplexity(&[
        "--model",
        model.to_str().unwrap(),
        "--file",
        alice().to_str().unwrap(),
        "--ctx-size",
        "128",
        "--chunks",
        "3",
        "--num-kv-blocks",
        "64",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    // One running estimate a chunk, as llama-perplexity prints them.
    assert!(
        stdout.starts_with("[1]") && stdout.contains(",[3]"),
        "{stdout}"
    );
    assert!(stderr.contains("3 chunks of 128"), "{stderr}");
    assert!(
        stderr.contains(&format!("{} tokens scored", 3 * (128 - 64 - 1))),
        "{stderr}"
    );
    // A scorer that read the wrong row (the token's own position, or two ahead) or the wrong
    // token would land near or above the vocabulary's 49,152; a 135M model on Carroll's prose
    // is within a few tens.
    let ppl = final_estimate(&stdout);
    assert!(ppl.is_finite() && ppl > 1.0 && ppl < 200.0, "{ppl}");
}

#[test]
fn a_random_tiny_model_scores_on_the_f32_path() {
    let model = crate::common::model::zoo("tiny-llama3");
    let (code, stdout, stderr) = perplexity(&[
        "--model",
        model.to_str().unwrap(),
        "--file",
        alice().to_str().unwrap(),
        "--ctx-size",
        "32",
        "--chunks",
        "2",
        "--num-kv-blocks",
        "64",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let ppl = final_estimate(&stdout);
    assert!(ppl.is_finite() && ppl > 1.0, "{ppl}");
}

#[test]
fn a_text_shorter_than_two_chunks_is_refused_with_its_length() {
    crate::common::skip_without_model!();
    let dir = std::env::temp_dir().join(format!("tokenmill-perplexity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short.txt");
    std::fs::write(&short, "Alice was beginning to get very tired.\n").unwrap();
    let model = tokenmill_server::model::model_loader::default_model_path();
    let (code, _, stderr) = perplexity(&[
        "--model",
        model.to_str().unwrap(),
        "--file",
        short.to_str().unwrap(),
        "--num-kv-blocks",
        "64",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("needs at least 1024 (two chunks)"),
        "{stderr}"
    );
}
