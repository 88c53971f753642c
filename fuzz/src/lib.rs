//! What the fuzz targets share: the real default model's tokenizer and chat template, loaded once.

use std::sync::{Arc, OnceLock};

use tokenmill_engine::models::checkpoint::default_model_path;
use tokenmill_engine::EngineLimits;
use tokenmill_server::text::chat_template::ChatTemplate;
use tokenmill_server::text::tokenizer::{self, Tokenizer};

pub struct TextSide {
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: ChatTemplate,
}

/// The default model's tokenizer and template (`scripts/fetch-model.sh` places the file).
/// Loading takes a second, so every run of a target shares one copy.
pub fn text_side() -> &'static TextSide {
    static TEXT: OnceLock<TextSide> = OnceLock::new();
    TEXT.get_or_init(|| {
        let path = default_model_path();
        let (tokenizer, template) = tokenizer::from_gguf_file(&path).unwrap_or_else(|e| {
            panic!("{}: {e}; run scripts/fetch-model.sh first", path.display())
        });
        let template = template.expect("the default model has a chat template");
        let chat_template = ChatTemplate::for_tokenizer(template, &tokenizer)
            .expect("the default model's chat template compiles");
        TextSide {
            tokenizer: Arc::new(tokenizer),
            chat_template,
        }
    })
}

/// The limits a server on the default model with default flags would have (8192 context,
/// a pool of 16-token blocks that holds one full context).
pub fn engine_limits() -> EngineLimits {
    let text = text_side();
    EngineLimits {
        vocab_size: text.tokenizer.vocab_size(),
        max_model_len: 8192,
        num_kv_blocks: 512,
        block_size: 16,
        max_waiting: 1024,
        eos_token_ids: text.tokenizer.eos_token_id().into_iter().collect(),
    }
}
