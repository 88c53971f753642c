//! `tokenmill serve`: the OpenAI-compatible HTTP server — its flags, startup, its connection
//! loop (HTTP/1.1 with a header read timeout, so silent or half-sent requests cannot hold
//! sockets), and graceful shutdown: a drain (`/health` and new generation requests answer
//! 503 while in-flight requests finish, within a bound; the rest are ended cleanly), then
//! the engine stops.

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::Router;
use clap::Args;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokenmill_engine::{EngineArgs, EngineHandle, PoolerConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::http::router;
use crate::kv_events::kv_event_publisher::KvEventPublisher;
use crate::kv_events::kv_events_config::KvEventsConfig;
use crate::metrics::{Metrics, MetricsCompat};
use crate::model::hub::HubArgs;
use crate::model::model_loader::{self, LoadedModel};
use crate::model::model_text_args::ModelTextArgs;
use crate::models::models_args::{ModelList, ModelsArgs};
use crate::serving::app_state::AppState;
use crate::serving::drain::Drain;
use crate::serving::request_limits::RequestLimits;
use crate::tools::reasoning_parser::ReasoningParserKind;
use crate::tools::tool_call_parser::ToolCallParserKind;

/// `--model`'s help, the engine's with what a server adds.
const MODEL_HELP: &str =
    "A .gguf file, a Hugging Face directory or a Hub name (org/repo[:QUANT]); \
with --load-format dummy, a shape name. Default: the cached SmolLM2-135M-Instruct Q4_1. Give it \
more than once (each NAME=PATH_OR_REPO) to serve several models, each loaded on its first request";

/// How long stopping the async runtime waits for blocking tasks still running.
pub(crate) const RUNTIME_EXIT_WAIT: Duration = Duration::from_millis(500);

// `--model` may be given more than once, each `NAME=PATH_OR_REPO`: a server of several
// models (`models_server`). The engine's flags keep the first; `model_list` reads them all.
#[derive(Args, Debug, Clone)]
#[command(mut_arg("model", |arg| arg.action(clap::ArgAction::Append).help(MODEL_HELP)))]
pub struct ServeArgs {
    /// Every `--model` given (read before `engine` takes the first).
    #[command(flatten)]
    pub model_list: ModelList,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub models: ModelsArgs,
    #[command(flatten)]
    pub text: ModelTextArgs,
    #[command(flatten)]
    pub hub: HubArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The model name clients send and see (default: the Hub name as given to --model, else
    /// the model file's stem).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Require `Authorization: Bearer KEY` on every /v1 route and on /tokenize and /detokenize
    /// (/health, /version and /metrics stay open for probes and scrapers).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Seconds in-flight requests may take to finish after SIGINT/SIGTERM. Shortly before this
    /// runs out, requests still generating are ended: each stream gets a final chunk with
    /// `finish_reason: "abort"` and `[DONE]`, each non-streamed reply the text so far.
    #[arg(long, default_value_t = ServerOptions::DEFAULT.shutdown_timeout.as_secs())]
    pub shutdown_timeout: u64,
    /// Seconds a client may take to send a request's headers, counted from when the server
    /// starts waiting for them (so it also closes idle keep-alive connections).
    #[arg(
        long,
        default_value_t = ServerOptions::DEFAULT.header_read_timeout.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub header_read_timeout: u64,
    /// Split chat replies' reasoning (`<think>…</think>`) into `reasoning_content`, as vLLM's
    /// flag of the same name does.
    #[arg(long, value_enum)]
    pub reasoning_parser: Option<ReasoningParserKind>,
    /// How tool calls are read from chat replies to requests with `tools`: `hermes`
    /// (`<tool_call>{json}</tool_call>` blocks), `llama3_json` (a reply that is a bare JSON
    /// call), or `auto` (both).
    #[arg(long, value_enum, default_value_t = ServerOptions::DEFAULT.tool_call_parser)]
    pub tool_call_parser: ToolCallParserKind,
    /// Also export the metrics under another engine's names: `vllm` adds `vllm:*` series
    /// (queue, running requests, KV usage, LoRA and cache config info, the counters and
    /// histograms), which endpoint pickers and dashboards written for vLLM read.
    #[arg(long, value_enum)]
    pub metrics_compat: Option<MetricsCompat>,
    #[command(flatten)]
    pub request_limits: RequestLimits,
    /// Publish KV-cache events over ZeroMQ as vLLM does: a JSON object with vLLM's keys, e.g.
    /// `{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
    /// "replay_endpoint": "tcp://*:5558", "topic": "kv-events"}` (docs/scale-out.md).
    #[arg(long, value_name = "JSON", value_parser = KvEventsConfig::parse)]
    pub kv_events_config: Option<KvEventsConfig>,
    /// Report in each reply's `usage` how many prompt tokens came from the prefix cache
    /// (`prompt_tokens_details.cached_tokens`), as vLLM's flag of the same name does.
    #[arg(long)]
    pub enable_prompt_tokens_details: bool,
    /// How `/v1/embeddings` turns the final hidden states into one vector, as vLLM's JSON:
    /// `{"pooling_type": "LAST"}` (the default: the last token's state) or `"MEAN"` (every
    /// position's, averaged), with `"normalize"` (default true: L2-normalized).
    #[arg(long, value_name = "JSON", value_parser = PoolerConfig::from_json)]
    pub pooler_config: Option<PoolerConfig>,
}

/// Server settings that are not about the engine.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub served_model_name: Option<String>,
    pub api_key: Option<String>,
    pub shutdown_timeout: Duration,
    pub header_read_timeout: Duration,
    pub request_limits: RequestLimits,
    pub reasoning_parser: Option<ReasoningParserKind>,
    pub tool_call_parser: ToolCallParserKind,
    /// `--kv-events-config`: publish the prefix cache's changes.
    pub kv_events: Option<KvEventsConfig>,
    pub metrics_compat: Option<MetricsCompat>,
    /// `--enable-prompt-tokens-details`: `usage.prompt_tokens_details.cached_tokens`.
    pub prompt_tokens_details: bool,
    /// `--pooler-config`: the pooling of `/v1/embeddings`.
    pub pooler: PoolerConfig,
}

impl ServerOptions {
    /// Every default, stated once: `Default` and the flags' defaults (`ServeArgs`) read it.
    pub const DEFAULT: Self = Self {
        served_model_name: None,
        api_key: None,
        shutdown_timeout: Duration::from_secs(30),
        header_read_timeout: Duration::from_secs(10),
        request_limits: RequestLimits::DEFAULT,
        reasoning_parser: None,
        tool_call_parser: ToolCallParserKind::Auto,
        kv_events: None,
        metrics_compat: None,
        prompt_tokens_details: false,
        pooler: PoolerConfig {
            pooling_type: tokenmill_engine::PoolingType::Last,
            normalize: true,
        },
    };
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl ServeArgs {
    /// Whether these flags ask for a server of several models: `--model` twice or named
    /// (`NAME=...`), or any of `--models-dir`, `--models-max`, `--sleep-idle-seconds`.
    pub fn several_models(&self) -> bool {
        let named = self
            .model_list
            .0
            .iter()
            .any(|m| crate::models::model_catalog::ModelSpec::parse(m).source != *m);
        self.model_list.0.len() > 1 || named || self.models.any()
    }

    pub fn options(&self) -> ServerOptions {
        ServerOptions {
            served_model_name: self.served_model_name.clone(),
            api_key: self.api_key.clone(),
            shutdown_timeout: Duration::from_secs(self.shutdown_timeout),
            header_read_timeout: Duration::from_secs(self.header_read_timeout),
            request_limits: self.request_limits.clone(),
            reasoning_parser: self.reasoning_parser,
            tool_call_parser: self.tool_call_parser,
            kv_events: self.kv_events_config.clone(),
            metrics_compat: self.metrics_compat,
            prompt_tokens_details: self.enable_prompt_tokens_details,
            pooler: self.pooler_config.unwrap_or_default(),
        }
    }
}

/// Starts the KV-cache event publisher `options` ask for on `runtime` (its sockets live
/// there) and gives its sink to the engine, before the engine thread starts.
fn start_kv_events(
    runtime: &tokio::runtime::Runtime,
    model: &mut LoadedModel,
    options: &ServerOptions,
) -> anyhow::Result<Option<KvEventPublisher>> {
    let Some(config) = options.kv_events.as_ref() else {
        return Ok(None);
    };
    if !config.publishes() {
        tracing::info!(
            "KV-cache events: off (--kv-events-config has enable_kv_cache_events {} and publisher {:?})",
            config.enable_kv_cache_events,
            config.publisher.as_deref().unwrap_or("null")
        );
        return Ok(None);
    }
    let (publisher, sink) = runtime.block_on(KvEventPublisher::start(config))?;
    model.engine.set_kv_event_sink(sink);
    Ok(Some(publisher))
}

/// Starts the engine thread and gathers what the handlers share.
pub fn app_state(
    model: LoadedModel,
    options: &ServerOptions,
    kv_events: Option<KvEventPublisher>,
) -> Arc<AppState> {
    let served = options
        .served_model_name
        .clone()
        .unwrap_or_else(|| model.name.clone());
    let hidden_size = model.engine.model_config().hidden_size;
    Arc::new(AppState {
        handle: EngineHandle::spawn(model.engine),
        tokenizer: model.tokenizer,
        chat_template: model.chat_template,
        generation_config: model.generation_config,
        metrics: Arc::new(
            Metrics::new(served.clone()).with_compat(options.metrics_compat, &model.config),
        ),
        served_model_name: served,
        root: model.name,
        api_key: options.api_key.clone(),
        reasoning_parser: options.reasoning_parser,
        tool_call_parser: options.tool_call_parser,
        prompt_tokens_details: options.prompt_tokens_details,
        limits: options.request_limits.clone(),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        config: model.config,
        drain: Default::default(),
        closing: tokio::sync::watch::Sender::new(false),
        constraint_compiler: std::sync::OnceLock::new(),
        kv_events,
        pooler: options.pooler,
        hidden_size,
    })
}

pub fn build_app(state: Arc<AppState>) -> Router {
    router::router(state)
}

/// The `serve` command with one model (`serve_command` picks it or several): load, listen,
/// serve until SIGINT/SIGTERM, drain, exit.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let addr = listen_address(&args)?;
    let local = args.hub.localize(&args.engine)?;
    let mut model = model_loader::load_with(&local.engine, &args.text)?;
    let mut options = args.options();
    options.served_model_name = options.served_model_name.or(local.hub_name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let kv_events = start_kv_events(&runtime, &mut model, &options)?;
    let state = app_state(model, &options, kv_events);
    let served = runtime.block_on(async {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        tracing::info!(
            "serving {} on http://{} (max_model_len {})",
            state.served_model_name,
            // The bound address, so `--port 0` reports the port it got.
            listener.local_addr().unwrap_or(addr),
            state.handle.limits().max_model_len
        );
        let app = build_app(state.clone());
        let close = || state.close_replies();
        serve(
            listener,
            app,
            &state.drain,
            &close,
            shutdown_signal(),
            &options,
        )
        .await
    });
    // Bounded: a blocking task (tokenizing a large prompt) must not hold the exit past the
    // drain limit; its reply is gone with its connection anyway.
    runtime.shutdown_timeout(RUNTIME_EXIT_WAIT);
    state.handle.shutdown();
    tracing::info!("stopped");
    served
}

/// `--host` and `--port` resolved.
pub(crate) fn listen_address(args: &ServeArgs) -> anyhow::Result<SocketAddr> {
    (args.host.as_str(), args.port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve --host {}", args.host))?
        .next()
        .with_context(|| format!("--host {} resolves to no address", args.host))
}

/// A server running on its own thread and runtime (for tests and embedding).
pub struct ServerHandle {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful stop: in-flight requests finish (within the shutdown timeout), then the engine stops.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    /// Starts the drain a SIGTERM starts, without waiting for it (`shutdown` waits).
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Whether the server thread has ended (the drain is over).
    pub fn has_stopped(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Binds `addr` (port 0 picks a free one) and serves `model` on a new thread.
pub fn spawn_server(
    mut model: LoadedModel,
    options: ServerOptions,
    addr: SocketAddr,
) -> anyhow::Result<ServerHandle> {
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let kv_events = start_kv_events(&runtime, &mut model, &options)?;
    let state = app_state(model, &options, kv_events);
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("tokenmill-http".into())
        .spawn(move || {
            let served = runtime.block_on(async {
                let listener = TcpListener::from_std(listener)?;
                let signal = async {
                    let _ = stopped.await;
                };
                let app = build_app(state.clone());
                let close = || state.close_replies();
                serve(listener, app, &state.drain, &close, signal, &options).await
            });
            if let Err(error) = served {
                tracing::error!("server failed: {error:#}");
            }
            runtime.shutdown_timeout(RUNTIME_EXIT_WAIT);
            state.handle.shutdown();
        })?;
    Ok(ServerHandle {
        addr,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// How long before the drain limit open replies are ended: long enough for their final chunks
/// and `[DONE]` to be written, short next to any drain limit worth setting.
fn closing_margin(drain: Duration) -> Duration {
    (drain / 2).min(Duration::from_secs(1))
}

/// Serves until `signal`, then drains: `/health` and new generation requests answer 503
/// (connections are still accepted, so clients get that answer rather than a refused
/// connection) while in-flight requests finish; the server returns as soon as none is left
/// and none has been refused for `drain::QUIET`.
/// Shortly before the shutdown timeout runs out it ends the ones still generating (each
/// stream gets a final chunk with finish reason `abort`, then `[DONE]`), and at the timeout
/// it gives up on whatever is left.
/// `drain_state` counts the requests a drain waits for; `close_replies` ends the open ones.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    drain_state: &Drain,
    close_replies: &dyn Fn(),
    signal: impl Future<Output = ()> + Send + 'static,
    options: &ServerOptions,
) -> anyhow::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let connections = GracefulShutdown::new();
    tokio::select! {
        () = accept_connections(&listener, &http, &app, &connections) => {}
        () = signal => {}
    }
    let drain = options.shutdown_timeout;
    let started = Instant::now();
    drain_state.begin();
    tracing::info!(
        "draining: /health answers 503 and new requests are refused; waiting for {} in flight",
        drain_state.in_flight()
    );
    let margin = closing_margin(drain);
    let finished = tokio::select! {
        () = accept_connections(&listener, &http, &app, &connections) => false,
        () = drain_state.settled(crate::serving::drain::QUIET) => true,
        () = tokio::time::sleep(drain - margin) => false,
    };
    drop(listener);
    if !finished {
        tracing::warn!(
            "requests still generating after {:?}; ending them",
            drain - margin
        );
        close_replies();
    }
    // What is left: idle keep-alive connections (closed now) and replies being written.
    let rest = drain.saturating_sub(started.elapsed()).max(margin);
    tokio::select! {
        () = connections.shutdown() => {}
        () = tokio::time::sleep(rest) => {
            tracing::warn!("connections still open after {drain:?}; closing them");
        }
    }
    Ok(())
}

/// Accepts connections until the future is dropped.
async fn accept_connections(
    listener: &TcpListener,
    http: &hyper::server::conn::http1::Builder,
    app: &Router,
    connections: &GracefulShutdown,
) {
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(error) => {
                // Out of file descriptors, most likely: retrying at once would spin; the
                // header read timeout frees the sockets that slow clients hold.
                tracing::warn!("cannot accept a connection: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let connection =
            http.serve_connection(TokioIo::new(socket), TowerToHyperService::new(app.clone()));
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!("connection closed: {error}");
            }
        });
    }
}

pub(crate) async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for SIGINT: {error}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(error) => {
                tracing::error!("cannot listen for SIGTERM: {error}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
