//! The flags of a server with several models: `--model` given more than once (each
//! `NAME=PATH_OR_REPO`), `--models-dir`, `--models-max` and `--sleep-idle-seconds` (the names
//! llama-server's router mode gives them), `--model-flags` and `--models-memory-gib`.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{ArgMatches, Args, Command, FromArgMatches};

use crate::models::model_flags::ModelFlags;

#[derive(Args, Debug, Clone, Default)]
pub struct ModelsArgs {
    /// Serve every GGUF file and model folder (one holding a `config.json`) in DIR, each
    /// named by its file stem or folder name and loaded on its first request.
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// Most models loaded at once: loading another first unloads the least recently used
    /// model that has no request in flight. Default: no limit.
    #[arg(long, value_name = "N")]
    pub models_max: Option<NonZeroUsize>,
    /// Unload a model once no request has used it for SECS seconds; its next request loads
    /// it again. Default: models stay loaded.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub sleep_idle_seconds: Option<u64>,
    /// One model's own engine and text flags, laid over this command's: NAME='FLAGS', e.g.
    /// `--model-flags small='--max-model-len 4096 --kv-cache-dtype q8_0'`. Once per model.
    #[arg(long, value_name = "NAME=FLAGS", value_parser = ModelFlags::parse)]
    pub model_flags: Vec<ModelFlags>,
    /// Memory the loaded models may hold together, in GiB, each counted as its weights'
    /// file size plus its --kv-cache-memory-gib: loading one more first unloads the least
    /// recently used idle models until it fits. Default: no budget.
    #[arg(long, value_name = "GIB", value_parser = positive_gib)]
    pub models_memory_gib: Option<f64>,
}

fn positive_gib(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(gib) if gib.is_finite() && gib > 0.0 => Ok(gib),
        _ => Err(format!("`{text}` is not a positive number of GiB")),
    }
}

impl ModelsArgs {
    /// Whether any of these flags asks for the server of several models.
    pub fn any(&self) -> bool {
        self.models_dir.is_some()
            || self.models_max.is_some()
            || self.sleep_idle_seconds.is_some()
            || !self.model_flags.is_empty()
            || self.models_memory_gib.is_some()
    }
}

/// Every `--model` given, in order. The engine's flags keep only the first; a server of
/// several models needs them all, so this reads the flag's values without taking them.
#[derive(Debug, Clone, Default)]
pub struct ModelList(pub Vec<String>);

impl FromArgMatches for ModelList {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let values = matches
            .try_get_many::<String>("model")
            .ok()
            .flatten()
            .map(|values| values.cloned().collect())
            .unwrap_or_default();
        Ok(Self(values))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for ModelList {
    /// Adds nothing: `--model` is the engine's flag, made repeatable by `ServeArgs`.
    fn augment_args(command: Command) -> Command {
        command
    }

    fn augment_args_for_update(command: Command) -> Command {
        command
    }
}
