//! `tokenmill serve` with several models (`--model NAME=PATH_OR_REPO` more than once,
//! `--models-dir`): no model is loaded at startup; each loads on its first request, with the
//! same engine and text flags, as its own engine, router and metrics (`models/`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::net::TcpListener;

use crate::http::api_server::{
    app_state, build_app, listen_address, serve, shutdown_signal, ServeArgs, RUNTIME_EXIT_WAIT,
};
use crate::model::model_loader;
use crate::models::model_catalog::{catalog, ModelSpec};
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
        bail!("--kv-events-config serves one model; it cannot be used with several");
    }
    let specs = catalog(&args.model_list.0, args.models.models_dir.as_deref())?;
    if specs.is_empty() {
        bail!("no model to serve: give --model NAME=PATH_OR_REPO or --models-dir DIR");
    }
    let registry = ModelRegistry::new(
        specs,
        loader(&args),
        UnloadPolicy {
            max_loaded: args.models.models_max,
            idle_after: args.models.sleep_idle_seconds.map(Duration::from_secs),
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

/// Loads one model as a server of it alone would, named as its spec says.
fn loader(args: &ServeArgs) -> ModelLoader {
    let args = args.clone();
    Arc::new(move |spec: &ModelSpec| {
        let mut engine = args.engine.clone();
        engine.model = Some(spec.source.clone());
        let local = args.hub.localize(&engine)?;
        let model = model_loader::load_with(&local.engine, &args.text)?;
        let mut options = args.options();
        options.served_model_name = Some(spec.name.clone());
        let state = app_state(model, &options, None);
        let router = build_app(state.clone());
        Ok((state, router))
    })
}
