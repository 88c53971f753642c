//! The default model's tokenizer on arbitrary text: encoding never panics and decodes back
//! to the same text (byte-level BPE has no normalizer, so every string round-trips, special
//! tokens written out included), less the characters the vocabulary has no token for
//! (SmolLM2 has no token for some bytes, which BPE drops as Hugging Face's does; found by this
//! target, kept in `crates/server/tests/tokenizer.rs`); arbitrary ids decode or fail, never
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tokenmill_fuzz::text_side;
use tokenmill_server::text::tokenizer::TokenBytes;

/// Whether the vocabulary has a token for byte `b`: byte-level BPE drops the others.
fn has_token(b: u8) -> bool {
    static BYTES: OnceLock<[bool; 256]> = OnceLock::new();
    BYTES.get_or_init(|| {
        let mut has = [false; 256];
        for token in text_side().tokenizer.token_bytes() {
            if let TokenBytes::Text(v) = token {
                if let [b] = v[..] {
                    has[b as usize] = true;
                }
            }
        }
        has
    })[b as usize]
}

fuzz_target!(|data: &[u8]| {
    let tokenizer = &text_side().tokenizer;
    let text = String::from_utf8_lossy(data);
    let ids = tokenizer.encode(&text, false).expect("any text encodes");
    assert!(ids.iter().all(|&id| (id as usize) < tokenizer.vocab_size()));
    let back = tokenizer.decode(&ids, false).expect("encoded ids decode");
    let kept: Vec<u8> = text.bytes().filter(|&b| has_token(b)).collect();
    let expressible = String::from_utf8_lossy(&kept);
    assert_eq!(back, expressible, "encode → decode round trip");
    let with_bos = tokenizer.encode(&text, true).expect("any text encodes");
    assert!(
        with_bos.ends_with(&ids),
        "special tokens are only added in front"
    );
    let _ = tokenizer.pre_tokenize(&text);

    let raw_ids: Vec<u32> = data
        .chunks_exact(2)
        .map(|pair| u32::from(u16::from_le_bytes([pair[0], pair[1]])))
        .collect();
    let _ = tokenizer.decode(&raw_ids, true);
    let _ = tokenizer.decode(&raw_ids, false);
});
