//! `AppState`: what every request handler shares — the engine handle, tokenizer, chat
//! template, names, the API key, the metrics, and the signal that ends every open reply at
//! shutdown.

use std::sync::{Arc, OnceLock};

use tokenmill_engine::{ConstraintCell, EngineHandle, PoolerConfig};
use tokio::sync::watch;

use crate::api::api_error::ApiError;
use crate::kv_events::kv_event_publisher::KvEventPublisher;
use crate::metrics::Metrics;
use crate::model::serving_config::ServingConfig;
use crate::serving::drain::Drain;
use crate::serving::request_limits::RequestLimits;
use crate::structured_output::constraint_compiler::ConstraintCompiler;
use crate::structured_output::StructuredOutput;
use crate::text::chat_template::ChatTemplate;
use crate::text::generation_config::GenerationConfig;
use crate::text::tokenizer::Tokenizer;
use crate::tools::reasoning_parser::ReasoningParserKind;
use crate::tools::tool_call_parser::ToolCallParserKind;

pub struct AppState {
    pub handle: EngineHandle,
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub chat_template: Option<ChatTemplate>,
    /// `--generation-config`: defaults for the sampling fields a request leaves unset.
    pub generation_config: GenerationConfig,
    /// The name clients must use in `model` (and see in `/v1/models`).
    pub served_model_name: String,
    /// What the model was loaded from (`root` in `/v1/models`).
    pub root: String,
    pub api_key: Option<String>,
    /// `--reasoning-parser`: chat replies split reasoning into `reasoning_content`.
    pub reasoning_parser: Option<ReasoningParserKind>,
    /// `--tool-call-parser`: how calls are read from replies to requests with tools.
    pub tool_call_parser: ToolCallParserKind,
    /// `--enable-prompt-tokens-details`: `usage` says how many prompt tokens were cached.
    pub prompt_tokens_details: bool,
    /// How much work one request may ask for.
    pub limits: RequestLimits,
    pub metrics: Arc<Metrics>,
    /// Unix seconds when the server started.
    pub created: u64,
    /// The engine settings, as the info endpoints report them.
    pub config: ServingConfig,
    /// In-flight generation requests, and whether the server is draining (shutting down).
    pub drain: Drain,
    /// Set once, when a shutdown's drain limit is about to run out: every choice still
    /// generating then ends with finish reason `abort`, so streams close with a final chunk
    /// and `[DONE]` instead of being cut.
    pub closing: watch::Sender<bool>,
    /// Built on the first structured-output request: a trie over the whole vocabulary that
    /// requests without constraints never need.
    pub constraint_compiler: OnceLock<Result<ConstraintCompiler, String>>,
    /// `--kv-events-config`: the running KV-cache event publisher, if any.
    pub kv_events: Option<KvEventPublisher>,
    /// `--pooler-config`: how `/v1/embeddings` pools the final hidden states.
    pub pooler: PoolerConfig,
    /// The model's hidden size: the width of its embeddings.
    pub hidden_size: usize,
}

impl AppState {
    /// Ends every open choice now (see `closing`); later requests end as soon as they start.
    pub fn close_replies(&self) {
        self.closing.send_replace(true);
    }

    /// An absent `model` means the one model served; any other name is a 404.
    pub fn check_model(&self, requested: Option<&str>) -> Result<(), ApiError> {
        match requested {
            None => Ok(()),
            Some(name) if name == self.served_model_name => Ok(()),
            Some(name) => Err(ApiError::model_not_found(name, &self.served_model_name)),
        }
    }

    /// Compiles a request's output constraint. Slow for a large schema: call it on the
    /// blocking pool.
    pub fn compile_constraint(
        &self,
        output: &StructuredOutput,
    ) -> Result<ConstraintCell, ApiError> {
        let tokenizer = self.tokenizer()?.clone();
        let compiler = self.constraint_compiler.get_or_init(|| {
            let limits = self.handle.limits();
            ConstraintCompiler::new(
                tokenizer,
                limits.vocab_size,
                &limits.eos_token_ids,
                self.metrics.clone(),
            )
        });
        match compiler {
            Ok(compiler) => compiler.compile(output),
            Err(why) => Err(ApiError::bad_param(
                output.param.clone(),
                format!("structured output is unavailable for this model: {why}"),
            )),
        }
    }

    pub fn tokenizer(&self) -> Result<&Arc<Tokenizer>, ApiError> {
        self.tokenizer.as_ref().ok_or_else(|| {
            ApiError::bad_request(
                "this model has no tokenizer (dummy weights): send token ids as `prompt` to /v1/completions",
            )
        })
    }
}
