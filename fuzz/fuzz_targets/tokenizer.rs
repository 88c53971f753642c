//! The default model's tokenizer on arbitrary text: encoding never panics and decodes back
//! to the same text (byte-level BPE has no normalizer, so every string round-trips, special
//! tokens written out included); arbitrary ids decode or fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenmill_fuzz::text_side;

fuzz_target!(|data: &[u8]| {
    let tokenizer = &text_side().tokenizer;
    let text = String::from_utf8_lossy(data);
    let ids = tokenizer.encode(&text, false).expect("any text encodes");
    assert!(ids.iter().all(|&id| (id as usize) < tokenizer.vocab_size()));
    let back = tokenizer.decode(&ids, false).expect("encoded ids decode");
    assert_eq!(back, text, "encode → decode round trip");
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
