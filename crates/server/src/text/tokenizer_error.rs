//! `TokenizerError`: everything that can go wrong while loading or running a tokenizer, from a
//! GGUF header or a `tokenizer.json`.

use std::path::PathBuf;

/// Everything that can go wrong while loading or running a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF metadata has no `{0}` entry")]
    MissingKey(&'static str),
    #[error("GGUF metadata `{key}` should be {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("tokenizer model `{0}` (tokenizer.ggml.model) is not supported; supported: gpt2 (byte-level BPE), llama (SentencePiece BPE)")]
    UnsupportedModel(String),
    #[error("pre-tokenizer `{0}` (tokenizer.ggml.pre) is not supported; known: default, gpt2, gpt-2, smollm, llama-bpe, qwen2")]
    UnknownPreTokenizer(String),
    #[error(
        "merge #{index} `{merge}` in tokenizer.ggml.merges is not two tokens separated by a space"
    )]
    BadMerge { index: usize, merge: String },
    #[error(
        "tokenizer.ggml.token_type has {types} entries but tokenizer.ggml.tokens has {tokens}"
    )]
    TokenTypeCount { types: usize, tokens: usize },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a readable GGUF file: {message}")]
    Gguf { path: PathBuf, message: String },
    #[error("{path} is not a valid tokenizer: {message}")]
    Load { path: PathBuf, message: String },
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("building the tokenizer failed: {0}")]
    Build(String),
    #[error("encoding failed: {0}")]
    Encode(String),
    #[error("decoding failed: {0}")]
    Decode(String),
}

pub type Result<T> = std::result::Result<T, TokenizerError>;
