//! The served model: loading it from a path (the engine, then the tokenizer, chat template
//! and generation defaults from the same checkpoint), the path a Hugging Face Hub name
//! stands for (`hub/`, fetched into the Hub's cache), the flags that replace its text files,
//! and the engine settings it is served with, as the info endpoints and metrics report them.

pub mod hub;
pub mod model_loader;
pub mod model_text_args;
pub mod serving_config;
