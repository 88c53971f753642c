//! Property tests over arbitrary input, in the spirit of fuzzing but on stable Rust in CI:
//! the real tokenizer round-trips any text, the streaming detokenizer gives exactly the
//! batch decode of any token sequence and never emits a stop string, and any request body
//! is either refused with an error or planned — never a panic.

use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use tokenmill_engine::EngineLimits;
use tokenmill_server::api::generation_request::GenerationRequest;
use tokenmill_server::generate::request_plan::{Endpoint, PlanRules, RequestPlan};
use tokenmill_server::serving::json_body::parse_json;
use tokenmill_server::serving::request_limits::RequestLimits;
use tokenmill_server::text::detokenizer::IncrementalDetokenizer;
use tokenmill_server::text::generation_config::GenerationConfig;
use tokenmill_server::text::tokenizer::{from_gguf_file, Tokenizer};

/// The default model's tokenizer, or `None` where the model is absent and may be (each case
/// then passes at once, and the test says SKIPPED: `common/model.rs`).
fn tokenizer() -> Option<Arc<Tokenizer>> {
    static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    if !crate::common::model::present() {
        return None;
    }
    let tokenizer = TOKENIZER.get_or_init(|| {
        let path = crate::common::model::path();
        Arc::new(from_gguf_file(&path).expect("tokenizer loads").0)
    });
    Some(tokenizer.clone())
}

/// Text mixing ordinary words, multi-byte characters, control characters and the chat
/// template's special-token spellings.
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        any::<String>(),
        "[a-z ]{1,12}",
        Just("<|im_start|>".to_string()),
        Just("<|im_end|>".to_string()),
        Just("héllo wörld 日本語 🦀".to_string()),
        Just("\n\t\r\u{0}".to_string()),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|v| v.concat())
}

/// A JSON value built from the request fields a client sends, with random shapes.
fn body() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        (-3i64..40).prop_map(Value::from),
        "[a-z<|>_ ]{0,10}".prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,8}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    });
    const FIELDS: [&str; 25] = [
        "model",
        "prompt",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "stop",
        "stream",
        "stream_options",
        "logprobs",
        "top_logprobs",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "ignore_eos",
        "min_tokens",
        "stop_token_ids",
        "echo",
        "suffix",
        "priority",
    ];
    prop::collection::vec((prop::sample::select(&FIELDS[..]), value), 0..8)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn limits() -> EngineLimits {
    EngineLimits {
        vocab_size: 49152,
        max_model_len: 64,
        num_kv_blocks: 16,
        block_size: 16,
        kv_capacity: tokenmill_engine::config::KvCapacity {
            num_pages: 16,
            short_context: 256,
            one_sequence: 256,
        },
        max_waiting: 8,
        eos_token_ids: vec![2],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_tokenizer_round_trips_any_text(s in text()) {
        let Some(t) = tokenizer() else { return Ok(()) };
        let ids = t.encode(&s, false).unwrap();
        prop_assert_eq!(t.decode(&ids, false).unwrap(), s);
    }

    #[test]
    fn streaming_any_ids_gives_exactly_the_batch_decode(
        ids in prop::collection::vec(0u32..49152, 0..40),
        skip_special in any::<bool>(),
    ) {
        let Some(t) = tokenizer() else { return Ok(()) };
        let mut detok = IncrementalDetokenizer::new(t.clone(), &[], Vec::new(), skip_special);
        let mut streamed = String::new();
        for &id in &ids {
            let step = detok.push(id).unwrap();
            prop_assert!(step.stopped.is_none());
            streamed.push_str(&step.text);
        }
        streamed.push_str(&detok.finish());
        prop_assert_eq!(streamed, t.decode(&ids, skip_special).unwrap());
    }

    #[test]
    fn streamed_text_stops_before_the_first_stop_string_and_never_contains_one(
        ids in prop::collection::vec(0u32..2000, 1..40),
        stop_len in 1usize..4,
    ) {
        let Some(t) = tokenizer() else { return Ok(()) };
        let full = t.decode(&ids, true).unwrap();
        // A stop string taken from the text itself, so it really occurs.
        let chars: Vec<char> = full.chars().collect();
        prop_assume!(chars.len() > stop_len);
        let at = chars.len() / 2;
        let stop: String = chars[at..(at + stop_len).min(chars.len())].iter().collect();
        let mut detok = IncrementalDetokenizer::new(t.clone(), &[], vec![stop.clone()], true);
        let mut streamed = String::new();
        let mut stopped = false;
        for &id in &ids {
            let step = detok.push(id).unwrap();
            streamed.push_str(&step.text);
            if step.stopped.is_some() {
                stopped = true;
                break;
            }
        }
        if !stopped {
            streamed.push_str(&detok.finish());
        }
        let first = full.find(&stop).expect("the stop string occurs");
        prop_assert_eq!(&streamed, &full[..first]);
        prop_assert!(!streamed.contains(&stop));
    }

    #[test]
    fn any_request_body_is_planned_or_refused_with_a_named_error(
        value in body(),
        chat in any::<bool>(),
    ) {
        let bytes = serde_json::to_vec(&value).unwrap();
        if let Ok(request) = parse_json::<GenerationRequest>(&bytes) {
            let endpoint = if chat { Endpoint::Chat } else { Endpoint::Completions };
            let prompts = vec![vec![1, 2, 3], vec![4; 10]];
            let rules = PlanRules {
                engine: &limits(),
                request_limits: &RequestLimits::default(),
                defaults: &GenerationConfig::default(),
            };
            match RequestPlan::new(&request, endpoint, prompts, &rules) {
                Ok(_) => {}
                Err(e) => {
                    prop_assert!(e.status.is_client_error(), "{} {}", e.status, e.message);
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_are_parsed_or_refused_as_a_client_error(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        if let Err(e) = parse_json::<GenerationRequest>(&bytes) {
            prop_assert!(e.status.is_client_error() && !e.message.is_empty());
        }
    }
}
