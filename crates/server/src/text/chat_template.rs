//! Renders a model's Jinja chat template (as shipped in GGUF or `tokenizer_config.json`) into a prompt string.

use minijinja::value::merge_maps;
use minijinja::{context, Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};

use crate::text::tokenizer::Tokenizer;

const TEMPLATE_NAME: &str = "chat_template";

/// Marks errors that the template raised on purpose, so they can be told apart from template bugs.
const RAISED_PREFIX: &str = "raise_exception: ";

/// One turn of a conversation. The tool fields are left out of the template's view when
/// absent, so templates testing `message.tool_calls is defined` see what Hugging Face gives them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant turn's calls, each `{"id", "type": "function", "function": {"name",
    /// "arguments"}}` with `arguments` as a JSON object (Hugging Face templates apply `tojson`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` turn: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("chat template does not parse: {0}")]
    Syntax(String),
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
}

pub type Result<T> = std::result::Result<T, ChatTemplateError>;

/// A compiled chat template with the special-token strings it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// The source reads a `tools` variable; one that does not would drop the tools unseen.
    renders_tools: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the texts templates see under those names.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self> {
        let source = source.into();
        let renders_tools = source.contains("tools");
        let mut env = hf_compatible_environment();
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        Ok(Self {
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
            renders_tools,
        })
    }

    /// Whether the template shows the model `tools` (and so, presumably, knows how to render
    /// `tool_calls` and `tool` turns); if not, the server describes them in text itself.
    pub fn renders_tools(&self) -> bool {
        self.renders_tools
    }

    /// Compiles `source`, taking the BOS/EOS texts from the tokenizer (empty when it has none).
    pub fn for_tokenizer(source: impl Into<String>, tokenizer: &Tokenizer) -> Result<Self> {
        let token_text = |id: Option<u32>| {
            id.and_then(|id| tokenizer.id_to_token(id))
                .unwrap_or_default()
        };
        Self::new(
            source,
            token_text(tokenizer.bos_token_id()),
            token_text(tokenizer.eos_token_id()),
        )
    }

    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &serde_json::Map::new())
    }

    /// [`render`](Self::render) with extra template variables (`chat_template_kwargs`, such as
    /// `enable_thinking`); they never replace the ones the server sets.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        self.render_with_tools(messages, add_generation_prompt, kwargs, None)
    }

    /// [`render_with`](Self::render_with) with the request's tools, given to the template as
    /// `tools` (a list of OpenAI tool objects, `none` without tools), as Hugging Face does.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &serde_json::Map<String, serde_json::Value>,
        tools: Option<&[serde_json::Value]>,
    ) -> Result<String> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Render(describe(&e)))?;
        let own = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            tools => tools,
        };
        // The last map holding a key wins, so the server's variables stay the server's.
        let variables = merge_maps([Value::from_serialize(kwargs), own]);
        template.render(variables).map_err(classify_render_error)
    }
}

/// Matches the settings Hugging Face uses when it applies chat templates, so whitespace comes out the same.
fn hf_compatible_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env
}

fn raise_exception(message: String) -> std::result::Result<String, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED_PREFIX}{message}"),
    ))
}

fn classify_render_error(error: Error) -> ChatTemplateError {
    match error
        .detail()
        .and_then(|detail| detail.strip_prefix(RAISED_PREFIX))
    {
        Some(message) => ChatTemplateError::Raised(message.to_owned()),
        None => ChatTemplateError::Render(describe(&error)),
    }
}

/// minijinja's message already names the template line, which is what someone fixing a template needs.
fn describe(error: &Error) -> String {
    error.to_string()
}
