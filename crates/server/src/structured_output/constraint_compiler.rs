//! `ConstraintCompiler`: turns a request's `StructuredOutput` into the engine's token
//! constraint, through llguidance over our tokenizer's vocabulary.
//!
//! Compiling can take milliseconds to seconds for a large schema, so callers run it on the
//! blocking pool; the parser factory (the vocabulary's trie) is built once, on first use.

use std::sync::Arc;

use llguidance::api::{GrammarWithLexer, TopLevelGrammar};
use llguidance::toktrie::TokEnv;
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::Value;
use tokenmill_engine::ConstraintCell;

use crate::api::api_error::ApiError;
use crate::metrics::Metrics;
use crate::structured_output::grammar_constraint::GrammarConstraint;
use crate::structured_output::grammar_tokenizer::GrammarTokenizer;
use crate::structured_output::{ConstraintKind, StructuredOutput};
use crate::text::tokenizer::Tokenizer;

pub struct ConstraintCompiler {
    factory: ParserFactory,
    grammar_eos: u32,
    eos_token_ids: Arc<[u32]>,
    metrics: Arc<Metrics>,
}

impl ConstraintCompiler {
    /// `vocab_size` is the model's logit row length; `eos_token_ids` every id that ends a reply.
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        vocab_size: usize,
        eos_token_ids: &[u32],
        metrics: Arc<Metrics>,
    ) -> Result<Self, String> {
        let grammar_eos = eos_token_ids
            .first()
            .copied()
            .or(tokenizer.eos_token_id())
            .ok_or("the model has no end-of-sequence token, so no grammar could end")?;
        let env: TokEnv = Arc::new(GrammarTokenizer::new(tokenizer, vocab_size, grammar_eos));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(Self {
            factory,
            grammar_eos,
            eos_token_ids: eos_token_ids.into(),
            metrics,
        })
    }

    /// A fresh constraint for one request; a grammar llguidance refuses is a 400 naming the
    /// field it came from, with llguidance's own message.
    pub fn compile(&self, output: &StructuredOutput) -> Result<ConstraintCell, ApiError> {
        let refused = |why: String| ApiError::bad_param(output.param.clone(), why);
        let grammar = top_level_grammar(&output.kind);
        // llguidance reports bad input as errors, but a panic deep in a compiler must still
        // reach the user as a refusal, never as a dropped connection.
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.factory.create_parser(grammar)
        }))
        .map_err(|_| refused(format!("`{}` could not be compiled", output.param)))?
        .map_err(|e| refused(format!("`{}` could not be compiled: {e}", output.param)))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(error) = matcher.get_error() {
            return Err(refused(format!(
                "`{}` could not be compiled: {error}",
                output.param
            )));
        }
        Ok(ConstraintCell::new(Box::new(GrammarConstraint::new(
            matcher,
            self.grammar_eos,
            self.eos_token_ids.clone(),
            self.metrics.clone(),
        ))))
    }
}

fn top_level_grammar(kind: &ConstraintKind) -> TopLevelGrammar {
    match kind {
        ConstraintKind::JsonSchema(schema) => {
            TopLevelGrammar::from_grammar(GrammarWithLexer::from_json_schema(compact(schema)))
        }
        ConstraintKind::Regex(regex) => TopLevelGrammar::from_regex(regex),
        ConstraintKind::Choice(choices) => {
            // Lark string literals are JSON strings, so JSON quoting escapes any choice.
            let alternatives: Vec<String> = choices
                .iter()
                .map(|c| Value::String(c.clone()).to_string())
                .collect();
            TopLevelGrammar::from_lark(format!("start: {}", alternatives.join(" | ")))
        }
        ConstraintKind::Lark(grammar) => TopLevelGrammar::from_lark(grammar.clone()),
    }
}

/// The schema with llguidance told to write JSON as OpenAI does (`{"a": 1, "b": 2}`), unless
/// the schema already carries its own `x-guidance` options. Free whitespace lets a small
/// model spend its whole budget on newlines.
fn compact(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        if !object.contains_key("x-guidance") {
            let options = JsonCompileOptions {
                item_separator: ", ".into(),
                key_separator: ": ".into(),
                whitespace_flexible: false,
                ..JsonCompileOptions::default()
            };
            if let Ok(options) = serde_json::to_value(options) {
                object.insert("x-guidance".into(), options);
            }
        }
    }
    schema
}
