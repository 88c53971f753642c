//! The flags that replace what a checkpoint says about text, as vLLM names them, through HTTP:
//! `--tokenizer`, `--chat-template` (a file or inline Jinja) and `--generation-config`
//! (`auto`, `vllm` or a folder), and the 400 a chat request gets without any template. The
//! models are the zoo's tiny-llama3 (a Hugging Face folder with no chat template, vocabulary
//! 512) and the SentencePiece tests' tiny Llama GGUF (vocabulary 1024), whose tokenizers differ.

use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{spawn_server, ServeArgs, ServerHandle, ServerOptions};
use tokenmill_server::model::model_loader::{self, LoadedModel};
use tokenmill_server::text::tokenizer::{from_gguf_file, Tokenizer};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn zoo(model: &str) -> PathBuf {
    crate::common::model::zoo(model)
}

/// `tokenmill serve`'s own flags parsed, then loaded the way `serve` loads them.
fn load(model: &Path, flags: &[&str]) -> anyhow::Result<LoadedModel> {
    let args = [
        "serve",
        "--model",
        model.to_str().unwrap(),
        "--num-kv-blocks",
        "64",
    ]
    .into_iter()
    .chain(flags.iter().copied());
    let cli = Cli::try_parse_from(args).expect("the flags parse");
    model_loader::load_with(&cli.serve.engine, &cli.serve.text)
}

fn serve(model: &Path, flags: &[&str]) -> ServerHandle {
    let loaded = load(model, flags).expect("the model loads");
    spawn_server(
        loaded,
        ServerOptions::default(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .expect("the server starts")
}

async fn post(server: &ServerHandle, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// A folder of its own for files a test writes.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tokenmill-text-flags-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const TEXT: &str = "the river runs 123 times, said Zoë";

/// A tiny Llama whose GGUF carries a SentencePiece vocabulary of 1024 (the SentencePiece tests' fixture).
fn spm_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spm/tiny-spm-llama.gguf")
}

/// Serves the SentencePiece model with `--tokenizer path` and checks /tokenize and /detokenize
/// give `expected`'s ids and text, which its own tokenizer does not.
async fn check_tokenizer_replaced(path: &Path, expected: &Tokenizer) {
    let (own, _) = from_gguf_file(&spm_model()).unwrap();
    let ids = expected.encode(TEXT, true).unwrap();
    assert_ne!(
        own.encode(TEXT, true).unwrap(),
        ids,
        "the tokenizers must differ on the text"
    );

    let server = serve(&spm_model(), &["--tokenizer", path.to_str().unwrap()]);
    let (status, reply) = post(&server, "/tokenize", json!({"prompt": TEXT})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["tokens"], json!(ids));
    let (_, text) = post(&server, "/detokenize", json!({"tokens": ids})).await;
    assert_eq!(text["prompt"], json!(expected.decode(&ids, false).unwrap()));
}

#[tokio::test]
async fn tokenizer_flag_with_a_tokenizer_json_replaces_the_checkpoints_tokenizer() {
    let file = zoo("tiny-llama3").join("tokenizer.json");
    check_tokenizer_replaced(&file, &Tokenizer::from_file(&file).unwrap()).await;
}

#[tokio::test]
async fn tokenizer_flag_with_a_folder_reads_its_tokenizer_json_and_config() {
    let folder = zoo("tiny-llama3");
    check_tokenizer_replaced(&folder, &Tokenizer::from_hf_dir(&folder).unwrap()).await;
}

#[tokio::test]
async fn tokenizer_flag_with_a_gguf_file_reads_its_tokenizer_metadata() {
    let file = zoo("tiny-llama3").join("model-f32.gguf");
    check_tokenizer_replaced(&file, &from_gguf_file(&file).unwrap().0).await;
}

#[test]
fn a_tokenizer_with_more_ids_than_the_model_is_refused_at_startup() {
    let err = load(
        &zoo("tiny-llama3"),
        &["--tokenizer", spm_model().to_str().unwrap()],
    )
    .err()
    .expect("a 1024-id tokenizer on a 512-id model is refused")
    .to_string();
    assert!(err.contains("--tokenizer"), "{err}");
    assert!(err.contains("1024") && err.contains("512"), "{err}");
}

#[tokio::test]
async fn a_chat_request_without_a_chat_template_is_a_400_that_names_the_flag() {
    let server = serve(&zoo("tiny-llama3"), &[]);
    let (status, reply) = post(
        &server,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 400, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("--chat-template"), "{message}");
    assert_eq!(reply["error"]["type"], "invalid_request_error", "{reply}");
    // Completions still work: the model is fine, only the chat route needs a template.
    let (status, reply) = post(
        &server,
        "/v1/completions",
        json!({"prompt": "hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
}

const TEMPLATE: &str = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\
                        {% if add_generation_prompt %}<assistant>{% endif %}";

async fn check_template_is_used(server: &ServerHandle) {
    let tokenizer = Tokenizer::from_hf_dir(zoo("tiny-llama3")).unwrap();
    let messages = json!([{"role": "user", "content": "the river"}]);
    let (status, reply) = post(server, "/tokenize", json!({"messages": messages})).await;
    assert_eq!(status, 200, "{reply}");
    let expected = tokenizer
        .encode("<user>the river<assistant>", false)
        .unwrap();
    assert_eq!(reply["tokens"], json!(expected));
    let (status, reply) = post(
        server,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 3, "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["usage"]["prompt_tokens"],
        json!(expected.len()),
        "{reply}"
    );
}

#[tokio::test]
async fn chat_template_flag_takes_the_jinja_text_itself() {
    let server = serve(&zoo("tiny-llama3"), &["--chat-template", TEMPLATE]);
    check_template_is_used(&server).await;
}

#[tokio::test]
async fn chat_template_flag_reads_a_template_file() {
    let path = scratch("template").join("chat.jinja");
    std::fs::write(&path, TEMPLATE).unwrap();
    let server = serve(
        &zoo("tiny-llama3"),
        &["--chat-template", path.to_str().unwrap()],
    );
    check_template_is_used(&server).await;
}

#[test]
fn a_chat_template_that_names_no_file_or_does_not_parse_is_refused_at_startup() {
    let missing = load(
        &zoo("tiny-llama3"),
        &["--chat-template", "no/such/template.jinja"],
    )
    .err()
    .expect("a missing template file is refused")
    .to_string();
    assert!(
        missing.contains("no/such/template.jinja") && missing.contains("no such file"),
        "{missing}"
    );
    let broken = load(
        &zoo("tiny-llama3"),
        &["--chat-template", "{% for m in messages %}"],
    )
    .err()
    .expect("a template that does not parse is refused")
    .to_string();
    assert!(broken.contains("--chat-template"), "{broken}");
}

/// A copy of tiny-llama3 (links to its files) with `generation_config.json` beside them.
fn tiny_llama3_with_generation_config(name: &str, config: Value) -> PathBuf {
    let dir = scratch(name);
    for entry in std::fs::read_dir(zoo("tiny-llama3")).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    std::fs::write(dir.join("generation_config.json"), config.to_string()).unwrap();
    dir
}

async fn completion(server: &ServerHandle, extra: Value) -> Value {
    let mut body = json!({"prompt": "the river", "ignore_eos": true});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, reply) = post(server, "/v1/completions", body).await;
    assert_eq!(status, 200, "{reply}");
    reply
}

fn token_count(reply: &Value) -> u64 {
    reply["usage"]["completion_tokens"].as_u64().unwrap()
}

#[tokio::test]
async fn generation_config_auto_reads_the_checkpoint_folder_and_requests_override_it() {
    let model = tiny_llama3_with_generation_config(
        "auto",
        json!({"temperature": 0.0, "max_new_tokens": 3, "do_sample": true}),
    );
    let server = serve(&model, &[]);
    let greedy = completion(&server, json!({"temperature": 0.0, "max_tokens": 3})).await;
    // No temperature and no length in the request: the file's greedy sampling and cap apply,
    // whatever the seed.
    for seed in [1, 2, 3] {
        let reply = completion(&server, json!({"seed": seed})).await;
        assert_eq!(token_count(&reply), 3, "{reply}");
        assert_eq!(reply["choices"][0]["finish_reason"], "length", "{reply}");
        assert_eq!(
            reply["choices"][0]["text"], greedy["choices"][0]["text"],
            "{reply}"
        );
    }
    let longer = completion(&server, json!({"max_tokens": 5})).await;
    assert_eq!(token_count(&longer), 5, "{longer}");
}

#[tokio::test]
async fn generation_config_vllm_ignores_the_file() {
    let model = tiny_llama3_with_generation_config(
        "vllm",
        json!({"temperature": 0.0, "max_new_tokens": 3}),
    );
    let server = serve(&model, &["--generation-config", "vllm"]);
    let greedy = completion(&server, json!({"temperature": 0.0, "max_tokens": 8})).await;
    // Sampling at the built-in temperature 1.0 over a random model's flat logits: eight seeds
    // giving the greedy text each time would mean the file's temperature 0 was applied.
    let mut differs = false;
    for seed in 1..=8 {
        let reply = completion(&server, json!({"seed": seed, "max_tokens": 8})).await;
        differs |= reply["choices"][0]["text"] != greedy["choices"][0]["text"];
    }
    assert!(differs, "every seeded sample equals the greedy text");
    let uncapped = completion(&server, json!({"temperature": 0.0, "max_tokens": 6})).await;
    assert_eq!(token_count(&uncapped), 6, "{uncapped}");
}

#[tokio::test]
async fn generation_config_folder_applies_to_any_checkpoint_and_chat_too() {
    let folder = scratch("folder");
    std::fs::write(
        folder.join("generation_config.json"),
        json!({"temperature": 0.0, "max_new_tokens": 2}).to_string(),
    )
    .unwrap();
    let server = serve(
        &zoo("tiny-llama3"),
        &[
            "--generation-config",
            folder.to_str().unwrap(),
            "--chat-template",
            TEMPLATE,
        ],
    );
    let reply = completion(&server, json!({})).await;
    assert_eq!(token_count(&reply), 2, "{reply}");
    let (status, chat) = post(
        &server,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["usage"]["completion_tokens"], 2, "{chat}");
}

#[test]
fn generation_config_folder_without_the_file_is_refused_at_startup() {
    let empty = scratch("empty");
    let err = load(
        &zoo("tiny-llama3"),
        &["--generation-config", empty.to_str().unwrap()],
    )
    .err()
    .expect("a folder without generation_config.json is refused")
    .to_string();
    assert!(err.contains("generation_config.json"), "{err}");
}
