//! The GGUF reader on corrupted copies of the real model's header (random bytes changed,
//! random truncation): every file is opened or refused with an error, and reading a
//! tensor from an opened one returns data or an error — never a panic or an abort.

use crate::common;

use proptest::prelude::*;
use std::io::Write;
use std::sync::OnceLock;
use tokenmill_engine::models::checkpoint::{Checkpoint, GgufCheckpoint};

/// The model file's metadata and tensor directory plus the first tensor bytes.
fn header() -> &'static [u8] {
    static HEADER: OnceLock<Vec<u8>> = OnceLock::new();
    HEADER.get_or_init(|| {
        let bytes = std::fs::read(common::model_path()).expect("model file");
        let mut reader = std::io::Cursor::new(&bytes);
        let content = candle_core::quantized::gguf_file::Content::read(&mut reader)
            .expect("the real model is a GGUF");
        let end = (content.tensor_data_offset as usize + 64 * 1024).min(bytes.len());
        bytes[..end].to_vec()
    })
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let len = header().len();
    // Early bytes (magic, version, counts, first keys) matter most: bias positions there.
    let position = prop_oneof![0..64usize, 0..4096usize, 0..len];
    let edit = (position, any::<u8>());
    // Half the cases keep the whole header, so some files open and have tensors read.
    let cut = prop_oneof![Just(len), 0..=len];
    (prop::collection::vec(edit, 1..6), cut).prop_map(|(edits, cut)| {
        let mut b = header().to_vec();
        for (at, v) in edits {
            b[at] = v;
        }
        b.truncate(cut.max(1));
        b
    })
}

// A plain test around the property, so the model's absence is seen before the strategy,
// which reads the model, is built.
#[test]
fn a_corrupted_gguf_is_opened_or_refused_never_a_panic() {
    common::skip_without_model!();
    proptest!(ProptestConfig::with_cases(96), |(bytes in mutated())| {
        let mut file = tempfile_in_shm();
        file.1.write_all(&bytes).unwrap();
        file.1.flush().unwrap();
        if let Ok(mut ckpt) = GgufCheckpoint::open(&file.0) {
            for name in ["token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"] {
                if ckpt.has_tensor(name) {
                    let _ = ckpt.read_tensor(name);
                }
            }
        }
        std::fs::remove_file(&file.0).ok();
    });
}

/// A fresh file for one case (the test binary's pid and a counter keep names apart).
fn tempfile_in_shm() -> (std::path::PathBuf, std::fs::File) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!(
        "tokenmill-gguf-{}-{}.gguf",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::File::create(&path).unwrap();
    (path, file)
}

/// The fuzzer's finding (`fuzz/findings`): a tiny Llama file whose `blk.0.ffn_down.weight` has
/// shape `[16, 0]`. candle read such a tensor through a dangling pointer; the loader now refuses
/// the file before any tensor is read, naming the tensor.
#[test]
fn a_gguf_with_an_empty_tensor_is_refused_by_name_before_candle_reads_it() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/findings/gguf-candle-unaligned-slice.gguf");
    let error = match GgufCheckpoint::open(&path) {
        Ok(_) => panic!("a file with an empty tensor opened"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("blk.0.ffn_down.weight") && error.contains("at least one element"),
        "{error}"
    );
}
