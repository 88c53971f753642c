//! Gemma 3's SentencePiece vocabulary, read from the real GGUF's tokenizer metadata, against
//! llama.cpp: `tests/fixtures/gemma3/tokenize-cases.json` holds llama-server's `/tokenize` ids
//! (made by `scripts/make-gemma3-tokenize-fixture.py`) for text in many scripts, code, emoji,
//! whitespace runs, digits and special tokens. The file (`scripts/fetch-gemma3.sh`) is 253 MB,
//! so these tests say SKIPPED and pass where it is not cached; a hand-built vocabulary of the same
//! shape checks each rule without it.
//!
//! SentencePiece itself agrees with every fixture text without a control token (it never reads
//! those in text). transformers' tokenizer built from this GGUF does not on runs of more than 31
//! spaces (the script's `--check-hf` shows them); llama.cpp, SentencePiece and we take the
//! 31-space user-defined piece first.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use candle_core::quantized::gguf_file::Value;
use serde::Deserialize;
use tokenmill_server::text::detokenizer::IncrementalDetokenizer;
use tokenmill_server::text::tokenizer::{from_gguf_file, TokenBytes, Tokenizer};

/// Where `scripts/fetch-gemma3.sh` caches the file (`TOKENMILL_GEMMA3_GGUF` names another).
fn gguf_path() -> PathBuf {
    if let Some(path) = std::env::var_os("TOKENMILL_GEMMA3_GGUF") {
        return PathBuf::from(path);
    }
    let dir = std::env::var_os("TOKENMILL_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
                });
            cache.join("tokenmill/models")
        });
    dir.join("gemma-3-270m-q4_k_m.gguf")
}

#[derive(Deserialize)]
struct Fixture {
    source: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    ids_with_special: Vec<u32>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/gemma3/tokenize-cases.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// The tokenizer the server builds for this file, or `None` (with a SKIPPED line) where it is absent.
fn tokenizer(test: &str) -> Option<&'static Arc<Tokenizer>> {
    static TOKENIZER: OnceLock<Option<Arc<Tokenizer>>> = OnceLock::new();
    let tokenizer = TOKENIZER.get_or_init(|| {
        let path = gguf_path();
        if !path.exists() {
            return None;
        }
        let (tokenizer, _) = from_gguf_file(&path)
            .unwrap_or_else(|e| panic!("{}: the tokenizer does not load: {e}", path.display()));
        Some(Arc::new(tokenizer))
    });
    if tokenizer.is_none() {
        eprintln!(
            "SKIPPED {test}: {} is absent (scripts/fetch-gemma3.sh fetches it)",
            gguf_path().display()
        );
    }
    tokenizer.as_ref()
}

/// Every case whose encoding differs, shown with its pieces, so one run shows every mismatch.
fn mismatches(tokenizer: &Tokenizer, with_special: bool) -> Vec<String> {
    let show = |ids: &[u32]| -> Vec<String> {
        ids.iter()
            .map(|&id| {
                tokenizer
                    .id_to_token(id)
                    .unwrap_or_else(|| format!("#{id}"))
            })
            .collect()
    };
    fixture()
        .cases
        .iter()
        .filter_map(|case| {
            let expected = if with_special {
                &case.ids_with_special
            } else {
                &case.ids
            };
            let ids = tokenizer.encode(&case.text, with_special).unwrap();
            (&ids != expected).then(|| {
                format!(
                    "{:?}\n  ours:      {ids:?} {:?}\n  llama.cpp: {expected:?} {:?}",
                    case.text,
                    show(&ids),
                    show(expected)
                )
            })
        })
        .collect()
}

#[test]
fn the_fixture_comes_from_llama_server_and_covers_whitespace_runs_and_special_tokens() {
    let fixture = fixture();
    assert!(
        fixture.source.contains("llama-server"),
        "{}",
        fixture.source
    );
    assert!(fixture.cases.len() >= 50);
    let texts: Vec<&str> = fixture.cases.iter().map(|c| c.text.as_str()).collect();
    assert!(texts.iter().any(|t| t.contains(&" ".repeat(32))));
    assert!(texts.iter().any(|t| t.contains("\n\n\n")));
    assert!(texts.iter().any(|t| t.contains("<start_of_turn>")));
}

#[test]
fn every_fixture_text_encodes_to_llama_cpps_ids() {
    let Some(tokenizer) = tokenizer("every_fixture_text_encodes_to_llama_cpps_ids") else {
        return;
    };
    let wrong = mismatches(tokenizer, false);
    assert!(
        wrong.is_empty(),
        "{} of {} differ:\n{}",
        wrong.len(),
        fixture().cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn with_special_tokens_bos_comes_first_as_the_file_asks() {
    let Some(tokenizer) = tokenizer("with_special_tokens_bos_comes_first_as_the_file_asks") else {
        return;
    };
    assert_eq!(tokenizer.bos_token_id(), Some(2));
    let wrong = mismatches(tokenizer, true);
    assert!(
        wrong.is_empty(),
        "{} of {} differ:\n{}",
        wrong.len(),
        fixture().cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_fixture_encoding_decodes_back_to_its_text() {
    let Some(tokenizer) = tokenizer("every_fixture_encoding_decodes_back_to_its_text") else {
        return;
    };
    for case in &fixture().cases {
        assert_eq!(
            tokenizer.decode(&case.ids, false).unwrap(),
            case.text,
            "{:?}",
            case.ids
        );
    }
}

/// The bytes grammar constraints see for `ids`, control tokens written as their names.
fn spelled(bytes: &[TokenBytes], ids: &[u32]) -> Vec<u8> {
    ids.iter()
        .flat_map(|&id| match &bytes[id as usize] {
            TokenBytes::Text(text) => text.clone(),
            TokenBytes::Special(name) => name.clone().into_bytes(),
        })
        .collect()
}

#[test]
fn each_fixture_encodings_piece_bytes_spell_its_text() {
    let Some(tokenizer) = tokenizer("each_fixture_encodings_piece_bytes_spell_its_text") else {
        return;
    };
    let bytes = tokenizer.token_bytes();
    for case in &fixture().cases {
        assert_eq!(
            String::from_utf8_lossy(&spelled(&bytes, &case.ids)),
            case.text,
            "{:?}",
            case.ids
        );
    }
}

#[test]
fn the_whole_vocabulary_and_its_control_tokens_are_there() {
    let Some(tokenizer) = tokenizer("the_whole_vocabulary_and_its_control_tokens_are_there") else {
        return;
    };
    assert_eq!(tokenizer.vocab_size(), 262_144);
    assert_eq!(tokenizer.eos_token_id(), Some(1));
    assert_eq!(tokenizer.token_to_id("<start_of_turn>"), Some(105));
    assert_eq!(tokenizer.token_to_id("<end_of_turn>"), Some(106));
}

// ---- a Gemma-shaped vocabulary built by hand: needs no file ----

/// Pieces laid out as Gemma's are: control tokens, user-defined runs of newlines and of plain
/// spaces and an HTML tag (all matched whole before BPE), normal pieces whose scores decide the
/// merges, and byte pieces for `x` and the two bytes of `é` only; no dummy prefix.
fn gemma_shaped_metadata() -> HashMap<String, Value> {
    const CONTROL: i32 = 3;
    const UNKNOWN: i32 = 2;
    const USER_DEFINED: i32 = 4;
    const NORMAL: i32 = 1;
    const BYTE: i32 = 6;
    let pieces: [(&str, i32, f32); 21] = [
        ("<pad>", CONTROL, -1000.0),
        ("<eos>", CONTROL, -1000.0),
        ("<bos>", CONTROL, -1000.0),
        ("<unk>", UNKNOWN, -1000.0),
        ("<start_of_turn>", CONTROL, -1000.0),
        ("<end_of_turn>", CONTROL, -1000.0),
        ("\n", USER_DEFINED, -1000.0),
        ("\n\n", USER_DEFINED, -1000.0),
        ("  ", USER_DEFINED, -1000.0),
        ("   ", USER_DEFINED, -1000.0),
        ("<b>", USER_DEFINED, -1000.0),
        ("▁", NORMAL, -10.0),
        ("a", NORMAL, -11.0),
        ("b", NORMAL, -12.0),
        ("c", NORMAL, -13.0),
        ("ab", NORMAL, -1.0),
        ("▁a", NORMAL, -2.0),
        ("▁ab", NORMAL, -0.5),
        ("<0x78>", BYTE, 0.0),
        ("<0xC3>", BYTE, 0.0),
        ("<0xA9>", BYTE, 0.0),
    ];
    let array =
        |f: &dyn Fn(&(&str, i32, f32)) -> Value| Value::Array(pieces.iter().map(f).collect());
    HashMap::from([
        ("tokenizer.ggml.model".into(), Value::String("llama".into())),
        (
            "tokenizer.ggml.tokens".into(),
            array(&|p| Value::String(p.0.to_owned())),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            array(&|p| Value::I32(p.1)),
        ),
        ("tokenizer.ggml.scores".into(), array(&|p| Value::F32(p.2))),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(3)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
        ("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false)),
    ])
}

fn gemma_shaped() -> Tokenizer {
    Tokenizer::from_gguf_metadata(&gemma_shaped_metadata()).expect("the vocabulary builds")
}

#[test]
fn without_a_dummy_prefix_a_word_at_the_start_takes_no_space_marker() {
    let tokenizer = gemma_shaped();
    assert_eq!(tokenizer.encode("ab", false).unwrap(), [15]);
    // A space that is really there becomes the marker, and `ab` (the best score) merges before `▁a`.
    assert_eq!(tokenizer.encode(" ab", false).unwrap(), [17]);
    assert_eq!(tokenizer.decode(&[11, 12], false).unwrap(), " a");
}

#[test]
fn runs_of_spaces_and_newlines_take_the_longest_user_defined_piece_first() {
    let tokenizer = gemma_shaped();
    assert_eq!(tokenizer.encode("a  b", false).unwrap(), [12, 8, 13]);
    assert_eq!(tokenizer.encode("a   b", false).unwrap(), [12, 9, 13]);
    // Five spaces: three, then two; never a marker piece, since the run is matched as raw text.
    assert_eq!(tokenizer.encode("a     b", false).unwrap(), [12, 9, 8, 13]);
    assert_eq!(tokenizer.encode("a\n\n\nb", false).unwrap(), [12, 7, 6, 13]);
    assert_eq!(tokenizer.decode(&[12, 9, 8, 13], false).unwrap(), "a     b");
}

#[test]
fn control_and_user_defined_tokens_in_text_match_whole_and_only_control_ones_are_skipped() {
    let tokenizer = gemma_shaped();
    let ids = tokenizer
        .encode("<start_of_turn><b>ab<end_of_turn>", false)
        .unwrap();
    assert_eq!(ids, [4, 10, 15, 5]);
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "<b>ab");
    assert_eq!(
        tokenizer.decode(&ids, false).unwrap(),
        "<start_of_turn><b>ab<end_of_turn>"
    );
}

#[test]
fn characters_outside_the_pieces_fall_back_to_their_bytes_or_else_to_unknown() {
    let tokenizer = gemma_shaped();
    assert_eq!(tokenizer.encode("xé", false).unwrap(), [18, 19, 20]);
    assert_eq!(tokenizer.decode(&[18, 19, 20], false).unwrap(), "xé");
    // `q` has no piece and no byte piece.
    assert_eq!(tokenizer.encode("aq", false).unwrap(), [12, 3]);
}

#[test]
fn bos_is_added_with_special_tokens_because_the_file_asks_for_it() {
    let tokenizer = gemma_shaped();
    assert_eq!(tokenizer.encode("ab", true).unwrap(), [2, 15]);
    let mut metadata = gemma_shaped_metadata();
    metadata.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(false));
    let without = Tokenizer::from_gguf_metadata(&metadata).unwrap();
    assert_eq!(without.encode("ab", true).unwrap(), [15]);
}

#[test]
fn eos_is_appended_with_special_tokens_only_where_the_file_asks_for_it() {
    assert_eq!(gemma_shaped().encode("ab", true).unwrap(), [2, 15]);
    let mut metadata = gemma_shaped_metadata();
    metadata.insert("tokenizer.ggml.add_eos_token".into(), Value::Bool(true));
    let with_eos = Tokenizer::from_gguf_metadata(&metadata).unwrap();
    assert_eq!(with_eos.encode("ab", true).unwrap(), [2, 15, 1]);
    assert_eq!(with_eos.encode("ab", false).unwrap(), [15]);
}

#[test]
fn streaming_detokenization_gives_each_fixture_text_whole() {
    let Some(tokenizer) = tokenizer("streaming_detokenization_gives_each_fixture_text_whole")
    else {
        return;
    };
    for case in &fixture().cases {
        let mut detok = IncrementalDetokenizer::new(tokenizer.clone(), &[], Vec::new(), false);
        let mut streamed = String::new();
        for &id in &case.ids {
            let step = detok.push(id).unwrap();
            // Half a character (a CJK or emoji byte piece) is held back, never sent as U+FFFD.
            assert!(!step.text.contains('\u{FFFD}'), "{:?}", case.text);
            streamed.push_str(&step.text);
        }
        streamed.push_str(&detok.finish());
        assert_eq!(streamed, case.text, "{:?}", case.ids);
    }
}

#[test]
fn piece_bytes_read_the_space_marker_byte_pieces_and_markers_as_sentencepiece_writes_them() {
    let tokenizer = gemma_shaped();
    let bytes = tokenizer.token_bytes();
    assert_eq!(bytes[17], TokenBytes::Text(b" ab".to_vec()));
    assert_eq!(bytes[19], TokenBytes::Text(vec![0xC3]));
    assert_eq!(bytes[8], TokenBytes::Text(b"  ".to_vec()));
    assert_eq!(bytes[10], TokenBytes::Text(b"<b>".to_vec()));
    assert_eq!(bytes[4], TokenBytes::Special("<start_of_turn>".to_owned()));
    assert_eq!(bytes[3], TokenBytes::Special("<unk>".to_owned()));
    let ids = tokenizer.encode("xé  ab", false).unwrap();
    assert_eq!(spelled(&bytes, &ids), "xé  ab".as_bytes());
}
