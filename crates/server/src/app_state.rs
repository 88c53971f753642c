//! `AppState`: what every request handler shares — the engine handle, tokenizer, chat
//! template, names, the API key, the metrics, and the signal that ends every open reply at
//! shutdown.

use std::sync::Arc;

use tokenmill_engine::EngineHandle;
use tokio::sync::watch;

use crate::api_error::ApiError;
use crate::chat_template::ChatTemplate;
use crate::metrics::Metrics;
use crate::reasoning_parser::ReasoningParserKind;
use crate::request_limits::RequestLimits;
use crate::tokenizer::Tokenizer;

pub struct AppState {
    pub handle: EngineHandle,
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub chat_template: Option<ChatTemplate>,
    /// The name clients must use in `model` (and see in `/v1/models`).
    pub served_model_name: String,
    /// What the model was loaded from (`root` in `/v1/models`).
    pub root: String,
    pub api_key: Option<String>,
    /// `--reasoning-parser`: chat replies split reasoning into `reasoning_content`.
    pub reasoning_parser: Option<ReasoningParserKind>,
    /// How much work one request may ask for.
    pub limits: RequestLimits,
    pub metrics: Arc<Metrics>,
    /// Unix seconds when the server started.
    pub created: u64,
    /// Set once, when a shutdown's drain limit is about to run out: every choice still
    /// generating then ends with finish reason `abort`, so streams close with a final chunk
    /// and `[DONE]` instead of being cut.
    pub closing: watch::Sender<bool>,
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

    pub fn tokenizer(&self) -> Result<&Arc<Tokenizer>, ApiError> {
        self.tokenizer.as_ref().ok_or_else(|| {
            ApiError::bad_request(
                "this model has no tokenizer (dummy weights): send token ids as `prompt` to /v1/completions",
            )
        })
    }
}
