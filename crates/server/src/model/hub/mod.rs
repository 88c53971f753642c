//! Models named on the Hugging Face Hub (`--model org/repo`, `org/repo:Q4_K_M`,
//! `org/repo/file.gguf`), kept in the cache `huggingface_hub` keeps, so a model either tool
//! fetched serves the other. From the top: `hub_args` (the flag, and `--model` made local),
//! `hub_model` (cache first, then the Hub), `hub_client` (HTTP through the `hf-hub` crate,
//! with checksums and resumed transfers), `model_files` (which files make a model),
//! `hub_cache`, `download_progress`, `model_reference`, `hub_settings`, `hub_error`.

mod download_progress;
mod hub_args;
mod hub_cache;
mod hub_client;
mod hub_error;
mod hub_model;
mod hub_settings;
mod model_files;
mod model_reference;

pub use hub_args::{HubArgs, LocalModel};
pub use hub_model::HubModel;
pub use hub_settings::HubSettings;
pub use model_files::DEFAULT_QUANT;
pub use model_reference::{FileSelector, ModelReference};
