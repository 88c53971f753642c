//! Loading a model for serving: the engine from the engine crate's flags, then the
//! tokenizer and chat template from the same checkpoint (text stays on this side), each
//! replaceable by its `ModelTextArgs` flag, and the request defaults `--generation-config` names.

use crate::model::model_text_args::ModelTextArgs;
use crate::model::serving_config::ServingConfig;
use crate::text::chat_template::ChatTemplate;
use crate::text::end_of_turn::end_of_turn_ids;
use crate::text::generation_config::{GenerationConfig, GenerationConfigSource};
use crate::text::tokenizer::{self, Tokenizer};
use anyhow::{bail, Context};
use std::path::Path;
use std::sync::Arc;
use tokenmill_engine::{Engine, EngineArgs};

/// The default model and where it is cached live in the engine crate, beside the loader.
pub use tokenmill_engine::models::checkpoint::{default_model_path, DEFAULT_MODEL_FILE};

/// An engine with what the server needs around it.
pub struct LoadedModel {
    pub engine: Engine,
    /// `None` for dummy weights without `--tokenizer`: they have no vocabulary text.
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub chat_template: Option<ChatTemplate>,
    /// Request defaults from `generation_config.json` (empty when none was read).
    pub generation_config: GenerationConfig,
    /// The name clients use (file stem or shape).
    pub name: String,
    /// The settings it runs with, for the info endpoints and metrics.
    pub config: ServingConfig,
}

/// The model with the checkpoint's own tokenizer, chat template and generation config.
pub fn load(args: &EngineArgs) -> anyhow::Result<LoadedModel> {
    load_with(args, &ModelTextArgs::default())
}

pub fn load_with(args: &EngineArgs, text: &ModelTextArgs) -> anyhow::Result<LoadedModel> {
    // The flags' own files first: a wrong path is refused before any weight is read.
    let template_flag = text.chat_template_source()?;
    let flagged_tokenizer = text
        .tokenizer
        .as_ref()
        .map(|path| {
            tokenizer::from_path(path)
                .with_context(|| format!("--tokenizer {}", path.display()))
                .map(|loaded| (path, loaded))
        })
        .transpose()?;
    if template_flag.is_some() && flagged_tokenizer.is_none() && args.load_format == "dummy" {
        bail!(
            "--chat-template needs a tokenizer, and dummy weights have none: give --tokenizer too"
        );
    }
    // `auto` needs the checkpoint's folder, known once it is opened; the others are read now.
    let named_config = match &text.generation_config {
        GenerationConfigSource::Auto => None,
        source => Some(GenerationConfig::load(source, None)?),
    };
    let loaded = args.build_engine()?;
    let checkpoint = loaded.checkpoint_path.as_deref();
    // Each template comes with where it was found, for the error a bad one gets.
    let (tokenizer, template) = match (flagged_tokenizer, checkpoint) {
        (Some((path, (tokenizer, own_template))), _) => {
            let vocab = loaded.engine.limits().vocab_size;
            if tokenizer.vocab_size() > vocab {
                bail!(
                    "--tokenizer {}: its {} ids do not fit the model's vocabulary of {vocab}",
                    path.display(),
                    tokenizer.vocab_size()
                );
            }
            // The template follows the tokenizer (as in vLLM), or else stays the checkpoint's.
            let template = match (own_template, checkpoint) {
                (Some(own), _) => Some((own, format!("--tokenizer {}", path.display()))),
                (None, Some(checkpoint)) => checkpoint_chat_template(checkpoint)?
                    .map(|t| (t, checkpoint.display().to_string())),
                (None, None) => None,
            };
            (Some(tokenizer), template)
        }
        (None, Some(checkpoint)) => {
            let (tokenizer, template) = checkpoint_text_side(checkpoint)?;
            let template = template.map(|t| (t, checkpoint.display().to_string()));
            (Some(tokenizer), template)
        }
        (None, None) => (None, None),
    };
    let template = match template_flag {
        Some(source) => Some((source, "--chat-template".to_owned())),
        None => template,
    };
    let chat_template = match (template, &tokenizer) {
        (Some((source, origin)), Some(tokenizer)) => Some(
            ChatTemplate::for_tokenizer(source, tokenizer)
                .with_context(|| format!("{origin}: bad chat template"))?,
        ),
        (Some(_), None) => bail!(
            "--chat-template needs a tokenizer, and dummy weights have none: give --tokenizer too"
        ),
        (None, _) => None,
    };
    let mut generation_config = match named_config {
        Some(config) => config,
        None => GenerationConfig::load(&GenerationConfigSource::Auto, checkpoint)?,
    };
    if let Some(origin) = &generation_config.origin {
        tracing::info!(
            "request defaults from {}: {} (--generation-config vllm ignores them)",
            origin.display(),
            generation_config.settings().join(", ")
        );
    }
    if let Some(tokenizer) = &tokenizer {
        let eos = &loaded.engine.limits().eos_token_ids;
        let ends = end_of_turn_ids(tokenizer, eos);
        if !ends.is_empty() {
            let named: Vec<String> = ends
                .iter()
                .map(|&id| format!("{} ({id})", tokenizer.id_to_token(id).unwrap_or_default()))
                .collect();
            tracing::info!(
                "a reply also ends at {} (`ignore_eos` lifts it)",
                named.join(", ")
            );
        }
        generation_config.also_stop_at(ends);
    }
    let model_path = checkpoint.map(|path| path.display().to_string());
    let config = ServingConfig::new(args, loaded.engine.limits(), model_path)?;
    Ok(LoadedModel {
        engine: loaded.engine,
        tokenizer: tokenizer.map(Arc::new),
        chat_template,
        generation_config,
        name: loaded.name,
        config,
    })
}

/// The checkpoint's tokenizer and chat template: GGUF metadata, or a Hugging Face
/// directory's tokenizer files.
fn checkpoint_text_side(path: &Path) -> anyhow::Result<(Tokenizer, Option<String>)> {
    Ok(if path.is_dir() {
        let tok = Tokenizer::from_hf_dir(path)?;
        (tok, tokenizer::hf_chat_template(path)?)
    } else {
        tokenizer::from_gguf_file(path)?
    })
}

/// The checkpoint's chat template alone, its tokenizer being replaced.
fn checkpoint_chat_template(path: &Path) -> anyhow::Result<Option<String>> {
    Ok(if path.is_dir() {
        tokenizer::hf_chat_template(path)?
    } else {
        tokenizer::gguf_file_chat_template(path)?
    })
}
