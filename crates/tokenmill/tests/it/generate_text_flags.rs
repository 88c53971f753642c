//! `tokenmill generate` takes `serve`'s text flags: `--chat-template` for a model that ships
//! none, `--generation-config` for the sampling flags left out, and `--tokenizer`. The model is
//! the zoo's tiny-llama3 (a Hugging Face folder with no chat template).

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

fn zoo(model: &str) -> PathBuf {
    crate::common::model::zoo(model)
}

/// Runs `generate --json` on tiny-llama3 with `flags`: the exit code, each JSON line, stderr.
fn generate(flags: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let model = zoo("tiny-llama3");
    let output = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .args(["generate", "--json", "--num-kv-blocks", "64", "--model"])
        .arg(&model)
        .args(flags)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs");
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object a line"))
        .collect();
    (
        output.status.code(),
        lines,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tokenmill-generate-flags-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn chat_needs_a_template_and_takes_one_from_the_flag() {
    let (code, _, stderr) = generate(&["--chat", "--prompt", "hi"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--chat-template"), "{stderr}");

    let template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>";
    let (code, with_template, stderr) = generate(&[
        "--chat",
        "--chat-template",
        template,
        "--prompt",
        "hi",
        "--max-tokens",
        "2",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, plain, stderr) = generate(&["--prompt", "<user>hi<assistant>", "--max-tokens", "2"]);
    // The rendered conversation is the prompt: the same tokens, the same greedy reply.
    assert_eq!(
        with_template[0]["prompt_tokens"], plain[0]["prompt_tokens"],
        "{stderr}"
    );
    assert_eq!(
        with_template[0]["token_ids"], plain[0]["token_ids"],
        "{stderr}"
    );
}

#[test]
fn generation_config_fills_the_sampling_flags_left_out() {
    let folder = scratch("config");
    std::fs::write(
        folder.join("generation_config.json"),
        json!({"max_new_tokens": 3}).to_string(),
    )
    .unwrap();
    let config = folder.to_str().unwrap();
    let (code, lines, stderr) = generate(&[
        "--generation-config",
        config,
        "--ignore-eos",
        "--prompt",
        "the river",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        lines[0]["token_ids"].as_array().unwrap().len(),
        3,
        "{}",
        lines[0]
    );
    let (_, lines, stderr) = generate(&[
        "--generation-config",
        config,
        "--ignore-eos",
        "--max-tokens",
        "5",
        "--prompt",
        "the river",
    ]);
    assert_eq!(
        lines[0]["token_ids"].as_array().unwrap().len(),
        5,
        "{stderr}"
    );
    // Without the file: the built-in 64.
    let (_, lines, stderr) = generate(&["--ignore-eos", "--prompt", "the river"]);
    assert_eq!(
        lines[0]["token_ids"].as_array().unwrap().len(),
        64,
        "{stderr}"
    );
}
