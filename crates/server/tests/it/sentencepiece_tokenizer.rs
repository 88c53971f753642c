//! GGUF `llama` tokenizers (SentencePiece BPE) against SentencePiece itself: the fixture made by
//! `scripts/make-spm-fixture.py` holds a trained vocabulary in a tiny Llama GGUF and sentencepiece's
//! own ids and text for varied strings; loaded the way the server loads it, ours must give the same.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use candle_core::quantized::gguf_file::Value;
use clap::Parser;
use serde::Deserialize;
use serde_json::json;
use tokenmill_engine::EngineArgs;
use tokenmill_server::http::api_server::{spawn_server, ServerHandle, ServerOptions};
use tokenmill_server::model::model_loader;
use tokenmill_server::text::detokenizer::IncrementalDetokenizer;
use tokenmill_server::text::tokenizer::{from_gguf_file, Tokenizer, TokenizerError};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spm")
}

fn gguf_path() -> PathBuf {
    fixture_dir().join("tiny-spm-llama.gguf")
}

#[derive(Deserialize)]
struct Fixture {
    bos_id: u32,
    eos_id: u32,
    vocab_size: usize,
    cases: Vec<EncodeCase>,
    decode_only: Vec<DecodeCase>,
}

#[derive(Deserialize)]
struct EncodeCase {
    text: String,
    ids: Vec<u32>,
    pieces: Vec<String>,
    decoded: String,
}

#[derive(Deserialize)]
struct DecodeCase {
    why: String,
    ids: Vec<u32>,
    decoded: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = fixture_dir().join("spm-cases.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// Through `from_gguf_file`, the function the server's model loader calls for a GGUF checkpoint.
fn tokenizer() -> Arc<Tokenizer> {
    static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    TOKENIZER
        .get_or_init(|| {
            let (tokenizer, _) = from_gguf_file(&gguf_path()).expect("the fixture GGUF loads");
            Arc::new(tokenizer)
        })
        .clone()
}

#[test]
fn the_fixture_reaches_byte_fallback_whitespace_pieces_and_merges() {
    let pieces: Vec<&str> = fixture()
        .cases
        .iter()
        .flat_map(|case| case.pieces.iter().map(String::as_str))
        .collect();
    assert!(pieces.iter().any(|p| p.starts_with("<0x")), "byte fallback");
    assert!(pieces.contains(&"▁▁"), "a piece of spaces only");
    assert!(
        pieces.iter().any(|p| p.chars().count() >= 6),
        "long merged pieces"
    );
    assert!(fixture().cases.len() >= 30);
}

#[test]
fn every_fixture_string_encodes_to_sentencepieces_ids() {
    let tokenizer = tokenizer();
    for case in &fixture().cases {
        let ids = tokenizer.encode(&case.text, false).unwrap();
        let pieces: Vec<String> = ids
            .iter()
            .map(|&id| tokenizer.id_to_token(id).unwrap())
            .collect();
        assert_eq!(
            (ids, pieces),
            (case.ids.clone(), case.pieces.clone()),
            "{:?}",
            case.text
        );
    }
}

#[test]
fn every_fixture_encoding_decodes_to_sentencepieces_text() {
    let tokenizer = tokenizer();
    for case in &fixture().cases {
        for skip_special_tokens in [false, true] {
            let text = tokenizer.decode(&case.ids, skip_special_tokens).unwrap();
            assert_eq!(text, case.decoded, "{:?}", case.text);
        }
    }
}

#[test]
fn id_sequences_no_encoding_yields_decode_as_sentencepiece_decodes_them() {
    let tokenizer = tokenizer();
    for case in &fixture().decode_only {
        let text = tokenizer.decode(&case.ids, true).unwrap();
        assert_eq!(text, case.decoded, "{}", case.why);
    }
}

#[test]
fn metadata_gives_bos_eos_and_the_whole_vocabulary() {
    let tokenizer = tokenizer();
    let fixture = fixture();
    assert_eq!(tokenizer.bos_token_id(), Some(fixture.bos_id));
    assert_eq!(tokenizer.eos_token_id(), Some(fixture.eos_id));
    assert_eq!(tokenizer.vocab_size(), fixture.vocab_size);
}

#[test]
fn add_bos_token_metadata_prepends_bos_only_with_special_tokens() {
    let tokenizer = tokenizer();
    let plain = tokenizer.encode("hello world", false).unwrap();
    let with_bos = tokenizer.encode("hello world", true).unwrap();
    assert_eq!(with_bos[0], fixture().bos_id);
    assert_eq!(with_bos[1..], plain[..]);
}

#[test]
fn control_tokens_in_text_match_whole_and_the_text_after_them_gets_its_own_space_prefix() {
    let tokenizer = tokenizer();
    let hello = tokenizer.encode("hello", false).unwrap();
    let ids = tokenizer.encode("<s>hello</s>", false).unwrap();
    let expected: Vec<u32> = [vec![fixture().bos_id], hello, vec![fixture().eos_id]].concat();
    assert_eq!(ids, expected);
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "hello");
}

#[test]
fn streaming_detokenization_gives_the_full_decode_of_every_fixture_string() {
    let tokenizer = tokenizer();
    for case in &fixture().cases {
        let mut detok = IncrementalDetokenizer::new(tokenizer.clone(), &[], Vec::new(), true);
        let mut streamed = String::new();
        for &id in &case.ids {
            let step = detok.push(id).unwrap();
            assert!(!step.text.contains('\u{FFFD}'), "{:?}", case.text);
            streamed.push_str(&step.text);
        }
        streamed.push_str(&detok.finish());
        assert_eq!(streamed, case.decoded, "{:?}", case.text);
    }
}

#[test]
fn a_continuation_streamed_after_its_prompt_keeps_the_space_before_its_first_word() {
    let tokenizer = tokenizer();
    let prompt = tokenizer.encode("the river", true).unwrap();
    let reply = tokenizer.encode("the mountain", false).unwrap();
    let mut detok = IncrementalDetokenizer::new(tokenizer.clone(), &prompt, Vec::new(), true);
    let mut streamed = String::new();
    for &id in &reply {
        streamed.push_str(&detok.push(id).unwrap().text);
    }
    streamed.push_str(&detok.finish());
    assert_eq!(streamed, " the mountain");
}

// ---- synthetic vocabularies: what the scores decide ----

/// `<unk> <s> </s> ▁ a b c ab bc ▁a` with the given scores for `ab` and `bc`, and the byte tokens of `a`..`c`.
fn synthetic_metadata(ab_score: f32, bc_score: f32) -> HashMap<String, Value> {
    let tokens = [
        "<unk>", "<s>", "</s>", "▁", "a", "b", "c", "ab", "bc", "▁a", "<0x61>", "<0x78>",
    ];
    let scores = [
        0.0, 0.0, 0.0, -10.0, -11.0, -12.0, -13.0, ab_score, bc_score, -3.0, 0.0, 0.0,
    ];
    let types = [2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 6];
    HashMap::from([
        ("tokenizer.ggml.model".into(), Value::String("llama".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(
                tokens
                    .iter()
                    .map(|t| Value::String(t.to_string()))
                    .collect(),
            ),
        ),
        (
            "tokenizer.ggml.scores".into(),
            Value::Array(scores.iter().map(|&s| Value::F32(s)).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.iter().map(|&t| Value::I32(t)).collect()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
    ])
}

fn pieces(metadata: &HashMap<String, Value>, text: &str) -> Vec<String> {
    let tokenizer = Tokenizer::from_gguf_metadata(metadata).unwrap();
    let ids = tokenizer.encode(text, false).unwrap();
    ids.iter()
        .map(|&id| tokenizer.id_to_token(id).unwrap())
        .collect()
}

#[test]
fn the_higher_scoring_piece_merges_first() {
    // `▁abc` starts as ▁ a b c; `ab` and `bc` overlap, so whichever scores higher wins the `b`.
    assert_eq!(
        pieces(&synthetic_metadata(-1.0, -2.0), "abc"),
        ["▁", "ab", "c"]
    );
    assert_eq!(pieces(&synthetic_metadata(-2.0, -1.0), "abc"), ["▁a", "bc"]);
}

#[test]
fn a_character_outside_the_vocabulary_falls_back_to_its_bytes_or_else_to_unknown() {
    let metadata = synthetic_metadata(-1.0, -2.0);
    assert_eq!(pieces(&metadata, "x"), ["▁", "<0x78>"]);
    // `é` has no byte tokens here; SentencePiece fuses a run of unknown characters into one `<unk>`.
    assert_eq!(pieces(&metadata, "céé"), ["▁", "c", "<unk>"]);
}

#[test]
fn without_add_space_prefix_no_marker_is_prepended_and_none_is_stripped() {
    let mut metadata = synthetic_metadata(-1.0, -2.0);
    metadata.insert("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false));
    assert_eq!(pieces(&metadata, "abc"), ["ab", "c"]);
    let tokenizer = Tokenizer::from_gguf_metadata(&metadata).unwrap();
    assert_eq!(tokenizer.decode(&[3, 7], false).unwrap(), " ab");
}

#[test]
fn a_llama_vocabulary_without_scores_is_refused_by_name() {
    let mut metadata = synthetic_metadata(-1.0, -2.0);
    metadata.remove("tokenizer.ggml.scores");
    let err = Tokenizer::from_gguf_metadata(&metadata).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MissingKey("tokenizer.ggml.scores")),
        "{err}"
    );
}

#[test]
fn a_llama_vocabulary_whose_scores_do_not_match_its_tokens_is_refused() {
    let mut metadata = synthetic_metadata(-1.0, -2.0);
    metadata.insert(
        "tokenizer.ggml.scores".into(),
        Value::Array(vec![Value::F32(0.0)]),
    );
    let err = Tokenizer::from_gguf_metadata(&metadata).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");
}

// ---- through HTTP ----

#[derive(Parser)]
struct EngineCli {
    #[command(flatten)]
    engine: EngineArgs,
}

/// The fixture served as any model is: `model_loader::load`, then the HTTP server.
fn server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        let path = gguf_path();
        let args = EngineCli::parse_from([
            "test",
            "--model",
            path.to_str().unwrap(),
            "--num-kv-blocks",
            "64",
        ]);
        let model = model_loader::load(&args.engine).expect("the fixture model loads");
        spawn_server(
            model,
            ServerOptions::default(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .expect("the server starts")
    })
}

async fn post(path: &str, body: serde_json::Value) -> serde_json::Value {
    let base = tokio::task::spawn_blocking(|| server().base_url())
        .await
        .unwrap();
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let reply: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{path} {body}: {reply}");
    reply
}

#[tokio::test]
async fn tokenize_over_http_gives_bos_then_sentencepieces_ids() {
    for case in &fixture().cases {
        let reply = post("/tokenize", json!({"prompt": case.text})).await;
        let expected: Vec<u32> = std::iter::once(fixture().bos_id)
            .chain(case.ids.iter().copied())
            .collect();
        assert_eq!(reply["tokens"], json!(expected), "{:?}", case.text);
    }
}

#[tokio::test]
async fn detokenize_over_http_gives_sentencepieces_text() {
    for case in &fixture().cases {
        let reply = post("/detokenize", json!({"tokens": case.ids})).await;
        assert_eq!(reply["prompt"], json!(case.decoded), "{:?}", case.text);
    }
}

#[tokio::test]
async fn the_fixture_model_serves_a_completion() {
    let reply = post(
        "/v1/completions",
        json!({"prompt": "the river", "max_tokens": 4, "temperature": 0, "ignore_eos": true}),
    )
    .await;
    let prompt = tokenizer().encode("the river", true).unwrap();
    assert_eq!(reply["usage"]["prompt_tokens"], prompt.len(), "{reply}");
    assert_eq!(reply["usage"]["completion_tokens"], 4, "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "length", "{reply}");
}

#[tokio::test]
async fn a_choice_constraint_on_a_sentencepiece_vocabulary_gives_one_of_its_texts() {
    // Spaces are spelled `▁` and rare characters as byte pieces: the grammar must read both
    // back as text, or choices with a space or an accent could not be spelled at all.
    let choices = ["the river", "a mountain garden", "Zoë's window"];
    for seed in 0..6 {
        let reply = post(
            "/v1/completions",
            json!({"prompt": "the", "max_tokens": 24, "seed": seed,
                   "structured_outputs": {"choice": choices}}),
        )
        .await;
        let text = reply["choices"][0]["text"].as_str().unwrap();
        assert!(choices.contains(&text), "{text:?} is no choice: {reply}");
    }
}
