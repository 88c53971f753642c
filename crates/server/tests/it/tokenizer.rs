//! Tokenizer checks: the real SmolLM2 GGUF against the golden file, and synthetic vocabularies per pre-tokenizer.

use std::collections::HashMap;

use crate::common::reference;
use candle_core::quantized::gguf_file::Value;

use tokenmill_server::text::tokenizer::{from_gguf_file, TokenBytes, Tokenizer, TokenizerError};

fn real_tokenizer() -> Tokenizer {
    from_gguf_file(&reference::model_path())
        .expect("load tokenizer from GGUF")
        .0
}

use reference::golden;

#[test]
fn every_golden_prompt_encodes_to_its_golden_ids() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    let golden = golden();
    assert!(!golden.cases.is_empty());
    for case in &golden.cases {
        let ids = tokenizer.encode(&case.prompt, false).unwrap();
        assert_eq!(ids, case.prompt_ids, "case {}", case.name);
    }
}

#[test]
fn every_golden_continuation_decodes_to_its_golden_text() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    for case in &golden().cases {
        let text = tokenizer.decode(&case.greedy_ids, false).unwrap();
        assert_eq!(text, case.greedy_text, "case {}", case.name);
    }
}

#[test]
fn smollm2_metadata_gives_bos_eos_and_full_vocabulary() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    assert_eq!(tokenizer.bos_token_id(), Some(1));
    assert_eq!(tokenizer.eos_token_id(), Some(2));
    assert_eq!(tokenizer.vocab_size(), 49152);
    assert_eq!(tokenizer.id_to_token(2).as_deref(), Some("<|im_end|>"));
    assert_eq!(tokenizer.token_to_id("<|im_start|>"), Some(1));
}

#[test]
fn chat_markers_in_raw_text_encode_to_their_single_ids() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    let ids = tokenizer.encode("<|im_start|><|im_end|>", false).unwrap();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn skipping_special_tokens_drops_chat_markers_from_decoded_text() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    let ids = tokenizer.encode("<|im_start|>hi<|im_end|>", false).unwrap();
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "hi");
    assert_eq!(
        tokenizer.decode(&ids, false).unwrap(),
        "<|im_start|>hi<|im_end|>"
    );
}

#[test]
fn smollm_splits_every_digit_into_its_own_token() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    // SmolLM2's vocabulary has no multi-digit tokens, so only the pre-tokenizer shows the split rule itself.
    assert_eq!(
        tokenizer.pre_tokenize("in 2024").unwrap(),
        ["in", " ", "2", "0", "2", "4"]
    );
    let ids = tokenizer.encode("12345", false).unwrap();
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| tokenizer.decode(&[id], false).unwrap())
        .collect();
    assert_eq!(pieces, ["1", "2", "3", "4", "5"]);
}

#[test]
fn unicode_text_round_trips_exactly() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    let text = "Crème brûlée 🍮🎉 — 東京タワー, 你好世界! Ñandú 👩‍👩‍👧";
    let ids = tokenizer.encode(text, false).unwrap();
    assert!(ids.len() > 10);
    assert_eq!(tokenizer.decode(&ids, false).unwrap(), text);
}

/// Found by the `tokenizer` fuzz target: SmolLM2's vocabulary has no token for some bytes,
/// and byte-level BPE (ours as Hugging Face's) drops a byte it cannot express instead of
/// failing, so the text that comes back lacks it. Every other byte round-trips.
#[test]
fn the_bytes_smollm2_has_no_token_for_are_dropped_and_every_other_byte_kept() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    let mut single = [false; 256];
    for token in tokenizer.token_bytes() {
        if let TokenBytes::Text(v) = token {
            if let [b] = v[..] {
                single[b as usize] = true;
            }
        }
    }
    let missing: Vec<usize> = (0..256).filter(|&b| !single[b]).collect();
    assert_eq!(missing, MISSING_BYTES, "{missing:#04x?}");
    let text = "Hello,\u{4}UUU\u{4f3cf}How are you\n?";
    let ids = tokenizer.encode(text, false).unwrap();
    // U+4F3CF is F1 8F 8F 8F: without its lead byte, three stray continuation bytes.
    let want = "Hello,UUU\u{fffd}\u{fffd}\u{fffd}How are you\n?";
    assert_eq!(tokenizer.decode(&ids, false).unwrap(), want);
}

/// Six C0 controls; 0xC0, 0xC1 and 0xF5–0xFF never occur in UTF-8; 0xF1 and 0xF2 lead only
/// the unassigned planes 4 to 11. So real text loses only those six control characters.
const MISSING_BYTES: [usize; 21] = [
    0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa,
    0xfb, 0xfc, 0xfd, 0xfe, 0xff,
];

#[test]
fn gguf_metadata_does_not_add_bos_when_the_model_says_not_to() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    let with = tokenizer.encode("hello", true).unwrap();
    let without = tokenizer.encode("hello", false).unwrap();
    assert_eq!(with, without);
}

#[test]
fn token_bytes_spell_out_exactly_what_decoding_writes() {
    crate::common::skip_without_model!();
    let tokenizer = real_tokenizer();
    let bytes = tokenizer.token_bytes();
    assert_eq!(bytes.len(), tokenizer.vocab_size());
    let marker = tokenizer.token_to_id("<|im_end|>").unwrap();
    assert_eq!(
        bytes[marker as usize],
        TokenBytes::Special("<|im_end|>".into())
    );
    // Byte-level pieces may split a character: only their concatenation is UTF-8.
    for text in [
        "Hello, world!\n",
        "naïve café – 東京 🎉",
        "{\"a\": [1, 2]}\t\r ",
    ] {
        let ids = tokenizer.encode(text, false).unwrap();
        let spelled: Vec<u8> = ids
            .iter()
            .flat_map(|&id| match &bytes[id as usize] {
                TokenBytes::Text(b) => b.clone(),
                TokenBytes::Special(name) => panic!("{text:?} holds special token {name}"),
            })
            .collect();
        assert_eq!(spelled, text.as_bytes(), "{text:?}");
    }
}

#[test]
fn missing_model_file_is_a_clear_error() {
    let err = from_gguf_file(std::path::Path::new("/nonexistent/model.gguf")).unwrap_err();
    assert!(matches!(err, TokenizerError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/model.gguf"), "{err}");
}

// ---- synthetic vocabularies ----

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
}

/// A tiny byte-level vocabulary: single characters, a few merged pieces and one control token.
fn synthetic_metadata(pre: &str) -> HashMap<String, Value> {
    let tokens = [
        "<s>", "</s>", "1", "2", "3", "4", "12", "34", "123", "h", "i", "hi", "Ġ", "Ġhi", "!",
    ];
    let merges = ["1 2", "3 4", "12 3", "h i", "Ġ hi"];
    let types: Vec<Value> = tokens
        .iter()
        .map(|t| Value::I32(if t.starts_with('<') { 3 } else { 1 }))
        .collect();
    HashMap::from([
        (
            "tokenizer.ggml.model".to_owned(),
            Value::String("gpt2".to_owned()),
        ),
        (
            "tokenizer.ggml.pre".to_owned(),
            Value::String(pre.to_owned()),
        ),
        ("tokenizer.ggml.tokens".to_owned(), strings(&tokens)),
        ("tokenizer.ggml.merges".to_owned(), strings(&merges)),
        ("tokenizer.ggml.token_type".to_owned(), Value::Array(types)),
        ("tokenizer.ggml.bos_token_id".to_owned(), Value::U32(0)),
        ("tokenizer.ggml.eos_token_id".to_owned(), Value::U32(1)),
    ])
}

fn token_texts(tokenizer: &Tokenizer, text: &str) -> Vec<String> {
    let ids = tokenizer.encode(text, false).unwrap();
    ids.iter()
        .map(|&id| tokenizer.id_to_token(id).unwrap())
        .collect()
}

#[test]
fn llama_bpe_groups_digits_in_runs_of_up_to_three() {
    let tokenizer = Tokenizer::from_gguf_metadata(&synthetic_metadata("llama-bpe")).unwrap();
    assert_eq!(
        tokenizer.pre_tokenize("1234 hi!").unwrap(),
        ["123", "4", " hi", "!"]
    );
    // "123" is one pre-token, so the merge order that would prefer "34" never gets a chance.
    assert_eq!(token_texts(&tokenizer, "1234"), ["123", "4"]);
}

#[test]
fn qwen2_splits_every_digit_alone() {
    let tokenizer = Tokenizer::from_gguf_metadata(&synthetic_metadata("qwen2")).unwrap();
    assert_eq!(
        tokenizer.pre_tokenize("1234 hi!").unwrap(),
        ["1", "2", "3", "4", " hi", "!"]
    );
    assert_eq!(token_texts(&tokenizer, "1234"), ["1", "2", "3", "4"]);
}

#[test]
fn gpt2_keeps_a_digit_run_whole_and_lets_merges_decide() {
    let tokenizer = Tokenizer::from_gguf_metadata(&synthetic_metadata("gpt2")).unwrap();
    assert_eq!(
        tokenizer.pre_tokenize("1234 hi!").unwrap(),
        ["1234", " hi", "!"]
    );
    assert_eq!(token_texts(&tokenizer, "1234"), ["12", "34"]);
}

#[test]
fn synthetic_control_token_matches_whole_and_is_skippable() {
    let tokenizer = Tokenizer::from_gguf_metadata(&synthetic_metadata("qwen2")).unwrap();
    let ids = tokenizer.encode("<s>hi</s>", false).unwrap();
    assert_eq!(ids, [0, 11, 1]);
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "hi");
    assert_eq!(
        (tokenizer.bos_token_id(), tokenizer.eos_token_id()),
        (Some(0), Some(1))
    );
}

#[test]
fn add_bos_token_metadata_prepends_bos_only_when_asked() {
    let mut metadata = synthetic_metadata("gpt2");
    metadata.insert("tokenizer.ggml.add_bos_token".to_owned(), Value::Bool(true));
    let tokenizer = Tokenizer::from_gguf_metadata(&metadata).unwrap();
    assert_eq!(tokenizer.encode("hi", true).unwrap(), [0, 11]);
    assert_eq!(tokenizer.encode("hi", false).unwrap(), [11]);
}

#[test]
fn unknown_pre_tokenizer_is_rejected_by_name() {
    let err = Tokenizer::from_gguf_metadata(&synthetic_metadata("klingon")).unwrap_err();
    assert!(matches!(err, TokenizerError::UnknownPreTokenizer(ref name) if name == "klingon"));
    assert!(err.to_string().contains("klingon"), "{err}");
}

#[test]
fn malformed_merge_is_rejected_with_its_position() {
    let mut metadata = synthetic_metadata("gpt2");
    metadata.insert(
        "tokenizer.ggml.merges".to_owned(),
        strings(&["1 2", "nospace"]),
    );
    let err = Tokenizer::from_gguf_metadata(&metadata).unwrap_err();
    assert!(
        matches!(err, TokenizerError::BadMerge { index: 1, .. }),
        "{err}"
    );
}

#[test]
fn an_unknown_tokenizer_model_is_refused_by_name() {
    let mut metadata = synthetic_metadata("gpt2");
    metadata.insert(
        "tokenizer.ggml.model".to_owned(),
        Value::String("bert".to_owned()),
    );
    let err = Tokenizer::from_gguf_metadata(&metadata).unwrap_err();
    assert!(
        matches!(err, TokenizerError::UnsupportedModel(ref name) if name == "bert"),
        "{err}"
    );
    assert!(err.to_string().contains("`bert`"), "{err}");
}

#[test]
fn hf_directory_reads_bos_and_eos_from_tokenizer_config() {
    let dir = std::env::temp_dir().join(format!("tokenmill-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), hf_tokenizer_json()).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": "{{ bos_token }}"}"#,
    )
    .unwrap();
    let tokenizer = Tokenizer::from_hf_dir(&dir).unwrap();
    let template = tokenmill_server::text::tokenizer::hf_chat_template(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(
        (tokenizer.bos_token_id(), tokenizer.eos_token_id()),
        (Some(0), Some(1))
    );
    assert_eq!(tokenizer.encode("hi", false).unwrap(), [3]);
    assert_eq!(template.as_deref(), Some("{{ bos_token }}"));
}

/// A minimal byte-level BPE `tokenizer.json`, written by hand for this test.
fn hf_tokenizer_json() -> String {
    serde_json::json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 1, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE",
            "vocab": {"<s>": 0, "</s>": 1, "h": 2, "hi": 3, "i": 4},
            "merges": ["h i"]
        }
    })
    .to_string()
}

// ---- streaming detokenization with the real tokenizer ----

mod streaming {
    use std::sync::Arc;

    use tokenmill_server::text::detokenizer::IncrementalDetokenizer;

    use super::real_tokenizer;

    /// Pushes every id and returns each step's text plus the stop string, if one matched.
    fn stream(detok: &mut IncrementalDetokenizer, ids: &[u32]) -> (Vec<String>, Option<String>) {
        let mut deltas = Vec::new();
        for &id in ids {
            let step = detok.push(id).unwrap();
            deltas.push(step.text);
            if step.stopped.is_some() {
                return (deltas, step.stopped);
            }
        }
        (deltas, None)
    }

    #[test]
    fn emoji_split_across_tokens_never_streams_a_replacement_character() {
        crate::common::skip_without_model!();
        let tokenizer = Arc::new(real_tokenizer());
        let text = "Dessert: 🍮🎉 and 東京!";
        let ids = tokenizer.encode(text, false).unwrap();
        let splits_a_character = ids
            .iter()
            .any(|&id| tokenizer.decode(&[id], false).unwrap().contains('\u{FFFD}'));
        assert!(
            splits_a_character,
            "test text must contain a character spread over tokens"
        );

        let mut detok = IncrementalDetokenizer::new(tokenizer.clone(), &[], vec![], false);
        let (deltas, stopped) = stream(&mut detok, &ids);
        assert_eq!(stopped, None);
        assert!(deltas.iter().all(|d| !d.contains('\u{FFFD}')), "{deltas:?}");
        assert!(
            deltas.iter().any(String::is_empty),
            "partial characters must be held back"
        );
        let streamed = deltas.concat() + &detok.finish();
        assert_eq!(streamed, tokenizer.decode(&ids, false).unwrap());
        assert_eq!(streamed, text);
    }

    #[test]
    fn stop_string_spanning_two_tokens_is_withheld_and_text_before_it_is_emitted() {
        crate::common::skip_without_model!();
        let tokenizer = Arc::new(real_tokenizer());
        let ids = tokenizer
            .encode("The capital of France is Paris.", false)
            .unwrap();
        let pieces: Vec<String> = ids
            .iter()
            .map(|&id| tokenizer.decode(&[id], false).unwrap())
            .collect();
        assert!(pieces.contains(&" France".to_owned()) && pieces.contains(&" is".to_owned()));

        let stop = "ance is".to_owned();
        let mut detok = IncrementalDetokenizer::new(tokenizer, &[], vec![stop.clone()], false);
        let (deltas, stopped) = stream(&mut detok, &ids);
        assert_eq!(stopped, Some(stop));
        assert_eq!(deltas.concat(), "The capital of Fr");
        assert!(detok.is_stopped());
        assert_eq!(detok.push(ids[0]).unwrap().text, "");
        assert_eq!(detok.finish(), "");
    }

    #[test]
    fn text_that_only_looked_like_a_stop_string_is_released_once_ruled_out() {
        crate::common::skip_without_model!();
        let tokenizer = Arc::new(real_tokenizer());
        let ids = tokenizer.encode("He is Paris. Yes", false).unwrap();
        let mut detok =
            IncrementalDetokenizer::new(tokenizer, &[], vec!["Paris!".to_owned()], false);
        let (deltas, stopped) = stream(&mut detok, &ids);
        assert_eq!(stopped, None);
        assert_eq!(deltas.concat(), "He is Paris. Yes");
    }

    #[test]
    fn finish_flushes_a_possible_stop_string_prefix_held_at_the_end() {
        crate::common::skip_without_model!();
        let tokenizer = Arc::new(real_tokenizer());
        let ids = tokenizer.encode("The capital is Par", false).unwrap();
        let mut detok =
            IncrementalDetokenizer::new(tokenizer, &[], vec!["Paris".to_owned()], false);
        let (deltas, _) = stream(&mut detok, &ids);
        assert_eq!(deltas.concat(), "The capital is ");
        assert_eq!(detok.finish(), "Par");
    }

    #[test]
    fn finish_flushes_an_incomplete_character_as_a_full_decode_would() {
        crate::common::skip_without_model!();
        let tokenizer = Arc::new(real_tokenizer());
        let ids = tokenizer.encode("ok 🍮", false).unwrap();
        let cut = &ids[..ids.len() - 1];
        let mut detok = IncrementalDetokenizer::new(tokenizer.clone(), &[], vec![], false);
        let (deltas, _) = stream(&mut detok, cut);
        let tail = detok.finish();
        assert!(tail.contains('\u{FFFD}'), "{tail:?}");
        assert_eq!(
            deltas.concat() + &tail,
            tokenizer.decode(cut, false).unwrap()
        );
    }

    #[test]
    fn skipped_special_tokens_do_not_reach_the_stream_and_prompt_context_is_not_repeated() {
        crate::common::skip_without_model!();
        let tokenizer = Arc::new(real_tokenizer());
        let prompt = tokenizer.encode("<|im_start|>assistant\n", false).unwrap();
        let reply = tokenizer.encode("Paris.<|im_end|>", false).unwrap();
        let mut detok = IncrementalDetokenizer::new(tokenizer, &prompt, vec![], true);
        let (deltas, _) = stream(&mut detok, &reply);
        assert_eq!(deltas.concat() + &detok.finish(), "Paris.");
    }
}
