//! The incremental detokenizer over arbitrary token ids and stop strings. Checked: no panic;
//! without a stop, the streamed pieces concatenate to the full decode of the ids, which holds
//! no stop string; with one, the text is that decode cut just before a stop string (or just
//! after it, when stop strings are included) and holds no stop string before the cut.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tokenmill_fuzz::text_side;
use tokenmill_server::text::detokenizer::IncrementalDetokenizer;

#[derive(Debug, Arbitrary)]
struct Input {
    /// Ids past the vocabulary (49152) appear too: a decode error must be an error.
    ids: Vec<u16>,
    stops: Vec<String>,
    skip_special_tokens: bool,
    include_stop: bool,
}

fuzz_target!(|input: Input| {
    let tokenizer = text_side().tokenizer.clone();
    let ids: Vec<u32> = input.ids.iter().map(|&id| u32::from(id)).collect();
    let Ok(full) = tokenizer.decode(&ids, input.skip_special_tokens) else {
        return;
    };
    let stops: Vec<String> = input.stops.into_iter().take(4).collect();
    let mut detok =
        IncrementalDetokenizer::new(tokenizer, &[], stops.clone(), input.skip_special_tokens)
            .including_stop_strings(input.include_stop);
    let mut text = String::new();
    let mut stopped: Option<String> = None;
    for &id in &ids {
        let step = detok
            .push(id)
            .expect("every id decoded as part of the whole");
        assert!(
            stopped.is_none() || step.text.is_empty(),
            "text after a stop"
        );
        text.push_str(&step.text);
        if step.stopped.is_some() {
            stopped = step.stopped;
        }
    }
    text.push_str(&detok.finish());

    let stops: Vec<&str> = stops
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if !detok.is_stopped() {
        assert_eq!(text, full, "no stop: the pieces are the whole text");
        for stop in &stops {
            assert!(!full.contains(stop), "{stop:?} went unnoticed in {full:?}");
        }
        return;
    }
    assert!(
        full.starts_with(&text),
        "{text:?} is not a prefix of {full:?}"
    );
    // Which stop ended the text: the one a push reported, else (a stop completed by the
    // final flush) any that fits. Stops completed by the same token may tie; any is right.
    let matched = |stop: &str| {
        if input.include_stop {
            text.ends_with(stop)
        } else {
            full[text.len()..].starts_with(stop)
        }
    };
    let stop = match &stopped {
        Some(s) => {
            assert!(matched(s), "{s:?} does not end {text:?} in {full:?}");
            s.as_str()
        }
        None => *stops
            .iter()
            .find(|s| matched(s))
            .expect("a stop string ends the text"),
    };
    let before_stop = if input.include_stop {
        &text[..text.len() - stop.len()]
    } else {
        text.as_str()
    };
    for stop in &stops {
        assert!(
            !before_stop.contains(stop),
            "{stop:?} inside {before_stop:?}"
        );
    }
});
