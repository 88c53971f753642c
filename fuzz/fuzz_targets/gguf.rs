//! Arbitrary bytes as a GGUF file: the checkpoint reader and the tokenizer/chat-template
//! loader either load it or return an error, never panic nor allocate without bound (run with
//! `-rss_limit_mb=2048 -malloc_limit_mb=2048`). An opened file's tensors are read and
//! an engine is built from it, as `serve` would build one.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tokenmill_engine::models::checkpoint::{Checkpoint, GgufCheckpoint};
use tokenmill_engine::{Engine, EngineConfig};
use tokenmill_server::text::chat_template::ChatTemplate;
use tokenmill_server::text::tokenizer;

/// One scratch file per process, rewritten per input: the readers take a path.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("tokenmill-fuzz-gguf-{}.gguf", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(path, data).expect("scratch file");
    if let Ok(mut ckpt) = GgufCheckpoint::open(path) {
        for name in [
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "output_norm.weight",
        ] {
            if ckpt.has_tensor(name) {
                let _ = ckpt.read_tensor(name);
            }
        }
        // What `serve` does next, with a pool and context small enough that only the file's
        // own claims could make loading allocate much.
        let config = EngineConfig {
            num_kv_blocks: Some(4),
            max_model_len: Some(64),
            ..EngineConfig::default()
        };
        let _ = Engine::load(&mut ckpt, config);
    }
    if let Ok((tokenizer, Some(template))) = tokenizer::from_gguf_file(path) {
        let _ = ChatTemplate::for_tokenizer(template, &tokenizer);
        let _ = tokenizer.encode("Hello, world! <|im_start|>", true);
    }
});
