//! Structured output: the constraint a request asks for (`structured_output`), compiled
//! against the vocabulary (`constraint_compiler`, `grammar_tokenizer`) into the engine's
//! per-request token mask (`grammar_constraint`).

pub mod constraint_compiler;
pub mod grammar_constraint;
pub mod grammar_tokenizer;
pub mod structured_output;
