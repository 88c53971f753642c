//! The prompts of a run: the datasets (random, mixed, ShareGPT, JSON lines, prefix
//! repetition, grounded and open chat) and their token counts, measured with the server's
//! tokenizer.

pub mod dataset;
pub mod grounded_prompts;
pub mod open_chat_prompts;
pub mod random_prompts;
pub mod token_counter;
pub mod tokenizer;
