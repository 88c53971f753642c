//! tokenmill server: tokenization, chat templates and streaming detokenization around the engine.
pub mod chat_template;
pub mod detokenizer;
pub mod tokenizer;
pub mod model_loader;
