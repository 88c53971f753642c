//! tokenmill server: tokenization, chat templates and streaming detokenization around the engine.
pub mod chat_template;
pub mod constraint_compiler;
pub mod detokenizer;
pub mod grammar_constraint;
pub mod grammar_tokenizer;
pub mod model_loader;
mod sentencepiece_bpe;
pub mod structured_output;
pub mod tokenizer;

pub mod api_error;
pub mod api_key;
pub mod api_server;
pub mod app_state;
pub mod choice_run;
pub mod field_policy;
pub mod generation_request;
pub mod json_body;
pub mod metrics;
pub mod reasoning_parser;
pub mod reply_builder;
pub mod request_limits;
pub mod request_plan;
pub mod routes;
pub mod tool_call_parser;
pub mod tool_grammar;
pub mod tool_prompt;
pub mod tool_request;
