//! Text around the engine's token ids: the tokenizer (Hugging Face's, or SentencePiece's
//! from a GGUF file), streaming detokenization, the chat template, and the model's
//! generation defaults (`generation_config.json`).

pub mod chat_template;
pub mod detokenizer;
pub mod end_of_turn;
pub mod generation_config;
mod gguf_metadata;
mod piece_spelling;
mod sentencepiece_bpe;
pub mod tokenizer;
mod tokenizer_error;
