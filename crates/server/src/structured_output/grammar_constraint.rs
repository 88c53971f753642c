//! `GrammarConstraint`: an llguidance matcher driving the engine's `TokenConstraint`, so a
//! reply follows a JSON schema, regex, choice or Lark grammar.

use std::sync::Arc;
use std::time::Instant;

use llguidance::Matcher;
use tokenmill_engine::{ConstraintError, TokenConstraint, TokenMask};

use crate::metrics::Metrics;

pub struct GrammarConstraint {
    matcher: Matcher,
    /// The id llguidance ends a grammar with, and every id the model ends with: the model may
    /// end on any of them, and each means the same to the grammar.
    grammar_eos: u32,
    eos_token_ids: Arc<[u32]>,
    metrics: Arc<Metrics>,
}

impl GrammarConstraint {
    pub fn new(
        matcher: Matcher,
        grammar_eos: u32,
        eos_token_ids: Arc<[u32]>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            matcher,
            grammar_eos,
            eos_token_ids,
            metrics,
        }
    }

    fn failed(&self, what: &str, error: impl std::fmt::Display) -> ConstraintError {
        ConstraintError(format!("{what}: {error}"))
    }
}

impl TokenConstraint for GrammarConstraint {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<(), ConstraintError> {
        let started = Instant::now();
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| self.failed("computing the token mask", e))?;
        self.metrics
            .record_mask_time(started.elapsed().as_secs_f64());
        let words = mask.words_mut();
        for (word, bits) in words.iter_mut().zip(allowed.as_slice()) {
            *word = *bits;
        }
        if allowed.is_allowed(self.grammar_eos) {
            for &eos in self.eos_token_ids.iter() {
                mask.allow(eos);
            }
        }
        Ok(())
    }

    fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        let token = if self.eos_token_ids.contains(&token) {
            self.grammar_eos
        } else {
            token
        };
        self.matcher
            .consume_token(token)
            .map_err(|e| self.failed("advancing the grammar", e))
    }

    fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    fn boxed_clone(&self) -> Box<dyn TokenConstraint> {
        Box::new(Self {
            // A deep clone: each choice runs its own parser, in parallel with its siblings.
            matcher: self.matcher.deep_clone(),
            grammar_eos: self.grammar_eos,
            eos_token_ids: self.eos_token_ids.clone(),
            metrics: self.metrics.clone(),
        })
    }
}
