//! `--revision`, and turning `--model` into a local path before the engine opens it: a path
//! that exists stays as it is, a Hub name (`org/repo[:QUANT]`, `org/repo/file.gguf`) becomes
//! the cached file or folder, fetched first where needed.

use super::hub_model::HubModel;
use super::hub_settings::HubSettings;
use super::model_reference::ModelReference;
use anyhow::bail;
use clap::Args;
use std::path::Path;
use tokenmill_engine::EngineArgs;

#[derive(Args, Debug, Clone, Default)]
pub struct HubArgs {
    /// The branch, tag or commit of a Hub model (`--model org/repo`) to serve. Default: main.
    #[arg(long)]
    pub revision: Option<String>,
}

/// `--model` as the engine can open it.
#[derive(Debug, Clone)]
pub struct LocalModel {
    /// The engine's flags, `--model` a local path.
    pub engine: EngineArgs,
    /// The Hub name as typed, which clients then use as the model's name (as vLLM does);
    /// `None` for a local model.
    pub hub_name: Option<String>,
}

impl HubArgs {
    pub fn localize(&self, engine: &EngineArgs) -> anyhow::Result<LocalModel> {
        self.localize_with(engine, &HubSettings::from_env())
    }

    pub fn localize_with(
        &self,
        engine: &EngineArgs,
        settings: &HubSettings,
    ) -> anyhow::Result<LocalModel> {
        let reference = match &engine.model {
            Some(model) if engine.load_format != "dummy" && !Path::new(model).exists() => {
                ModelReference::parse(model).map(|reference| (model, reference))
            }
            _ => None,
        };
        let Some((typed, reference)) = reference else {
            if let Some(revision) = &self.revision {
                bail!(
                    "--revision {revision} is for a model named on the Hugging Face Hub \
                     (--model org/repo), and --model names none"
                );
            }
            return Ok(LocalModel {
                engine: engine.clone(),
                hub_name: None,
            });
        };
        let revision = self.revision.as_deref().unwrap_or("main");
        let model = HubModel::resolve(&reference, revision, settings)?;
        let mut engine = engine.clone();
        engine.model = Some(model.path.display().to_string());
        Ok(LocalModel {
            engine,
            hub_name: Some(typed.clone()),
        })
    }
}
