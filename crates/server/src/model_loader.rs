//! Loading a model for serving: the engine from the engine crate's flags, then the
//! tokenizer and chat template from the same checkpoint (text stays on this side).

use crate::chat_template::ChatTemplate;
use crate::serving_config::ServingConfig;
use crate::tokenizer::{self, Tokenizer};
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use tokenmill_engine::{Engine, EngineArgs};

/// The default model and where it is cached live in the engine crate, beside the loader.
pub use tokenmill_engine::models::checkpoint::{default_model_path, DEFAULT_MODEL_FILE};

/// An engine with what the server needs around it.
pub struct LoadedModel {
    pub engine: Engine,
    /// `None` for dummy weights, which have no vocabulary text.
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub chat_template: Option<ChatTemplate>,
    /// The name clients use (file stem or shape).
    pub name: String,
    /// The settings it runs with, for the info endpoints and metrics.
    pub config: ServingConfig,
}

pub fn load(args: &EngineArgs) -> anyhow::Result<LoadedModel> {
    let loaded = args.build_engine()?;
    let (tokenizer, chat_template) = match &loaded.checkpoint_path {
        Some(path) => {
            let (tokenizer, template) = load_text_side(path)?;
            (Some(Arc::new(tokenizer)), template)
        }
        None => (None, None),
    };
    let model_path = loaded
        .checkpoint_path
        .as_ref()
        .map(|path| path.display().to_string());
    let config = ServingConfig::new(args, loaded.engine.limits(), model_path)?;
    Ok(LoadedModel {
        engine: loaded.engine,
        tokenizer,
        chat_template,
        name: loaded.name,
        config,
    })
}

/// The checkpoint's tokenizer and chat template: GGUF metadata, or a Hugging Face
/// directory's tokenizer files.
fn load_text_side(path: &Path) -> anyhow::Result<(Tokenizer, Option<ChatTemplate>)> {
    let (tokenizer, template) = if path.is_dir() {
        let tok = Tokenizer::from_hf_dir(path)?;
        (tok, tokenizer::hf_chat_template(path)?)
    } else {
        tokenizer::from_gguf_file(path)?
    };
    let chat_template = template
        .map(|t| ChatTemplate::for_tokenizer(t, &tokenizer))
        .transpose()
        .with_context(|| format!("{}: bad chat template", path.display()))?;
    Ok((tokenizer, chat_template))
}
