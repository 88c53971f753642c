//! `tokenmill serve` with several models (`--model NAME=PATH_OR_REPO` more than once,
//! `--models-dir`): no model is loaded at startup; each loads on its first request, with the
//! serve command's engine and text flags and its own `--model-flags` over them, as its own
//! engine, router and metrics (`models/`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Command};
use tokio::net::TcpListener;

use crate::http::api_server::{
    app_state, build_app, listen_address, serve, shutdown_signal, ServeArgs, RUNTIME_EXIT_WAIT,
};
use crate::model::model_loader;
use crate::models::model_catalog::{catalog, ModelSpec};
use crate::models::model_flags::{self, ModelSettings, ServeFlags};
use crate::models::model_footprint::Footprint;
use crate::models::model_registry::{ModelLoader, ModelRegistry, UnloadPolicy};
use crate::models::model_switch::{front_router, Front};

/// Serves every model the flags name until SIGINT/SIGTERM, then drains and stops them.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let addr = listen_address(&args)?;
    let options = args.options();
    if let Some(name) = &options.served_model_name {
        bail!(
            "--served-model-name {name} names one model; with several, name each as \
             --model NAME=PATH_OR_REPO"
        );
    }
    if options.kv_events.is_some() {
        // vLLM's events carry no model name: a router reading one stream would mix two
        // models' block hashes as one cache.
        bail!(
            "--kv-events-config serves one model (vLLM's KV-cache events name no model); \
             run a server per model to publish each one's events"
        );
    }
    let specs = catalog(&args.model_list.0, args.models.models_dir.as_deref())?;
    if specs.is_empty() {
        bail!("no model to serve: give --model NAME=PATH_OR_REPO or --models-dir DIR");
    }
    let settings = if args.models.model_flags.is_empty() {
        specs
            .iter()
            .map(|spec| (spec.name.clone(), base_settings(&args)))
            .collect()
    } else {
        let words = model_flags::serve_words()?;
        let serve = ServeFlags {
            base: base_settings(&args),
            command: ServeArgs::augment_args(Command::new("serve")),
            words: &words,
        };
        model_flags::settings(&serve, &specs, &args.models.model_flags)?
    };
    let models = specs
        .into_iter()
        .map(|spec| {
            let footprint = Footprint::estimate(&spec.source, &settings[&spec.name].engine);
            (spec, footprint)
        })
        .collect();
    let registry = ModelRegistry::new(
        models,
        loader(&args, settings),
        UnloadPolicy {
            max_loaded: args.models.models_max,
            idle_after: args.models.sleep_idle_seconds.map(Duration::from_secs),
            memory_budget: args
                .models
                .models_memory_gib
                .map(|gib| (gib * (1u64 << 30) as f64) as u64),
        },
    );
    let front = Front {
        registry: registry.clone(),
        api_key: options.api_key.clone(),
        max_body_bytes: options.request_limits.max_request_body_bytes,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(async {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        tracing::info!(
            "serving {} models ({}) on http://{} (each loads on its first request)",
            registry.names().len(),
            registry.names().join(", "),
            listener.local_addr().unwrap_or(addr),
        );
        tokio::spawn(registry.clone().unload_idle_models());
        let close = || registry.close_replies();
        let app = front_router(front);
        serve(
            listener,
            app,
            &registry.drain,
            &close,
            shutdown_signal(),
            &options,
        )
        .await
    });
    runtime.shutdown_timeout(RUNTIME_EXIT_WAIT);
    registry.stop_all();
    tracing::info!("stopped");
    served
}

fn base_settings(args: &ServeArgs) -> ModelSettings {
    ModelSettings {
        engine: args.engine.clone(),
        text: args.text.clone(),
    }
}

/// Loads one model as a server of it alone with its settings would, named as its spec says.
fn loader(args: &ServeArgs, settings: HashMap<String, ModelSettings>) -> ModelLoader {
    let args = args.clone();
    Arc::new(move |spec: &ModelSpec| {
        let own = settings
            .get(&spec.name)
            .with_context(|| format!("no settings for `{}`", spec.name))?;
        let mut engine = own.engine.clone();
        engine.model = Some(spec.source.clone());
        let local = args.hub.localize(&engine)?;
        let model = model_loader::load_with(&local.engine, &own.text)?;
        let mut options = args.options();
        options.served_model_name = Some(spec.name.clone());
        let state = app_state(model, &options, None);
        let router = build_app(state.clone());
        Ok((state, router))
    })
}
