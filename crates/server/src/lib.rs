//! tokenmill server: the HTTP APIs (OpenAI's, Anthropic's) around the engine, and the text
//! (tokenizer, chat template, detokenizer) that the engine's token ids never carry.
//!
//! Rooms from the top down; a room names only rooms beneath it (ARCHITECTURE.md's code map):
//! `http` serves the routes; `models` puts several models behind one server; `openai` and `anthropic` speak the protocols; `generate` plans a
//! request and runs it on the engine; `serving` holds the state every handler shares;
//! `tools`, `structured_output`, `metrics`, `kv_events`, `model`, `api` and `text` below.

pub mod http;
pub mod models;

pub mod anthropic;
pub mod openai;

pub mod generate;
pub mod serving;

pub mod structured_output;
pub mod tools;

pub mod kv_events;
pub mod metrics;
pub mod model;

pub mod api;
pub mod text;
