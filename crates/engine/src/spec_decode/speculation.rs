//! `Speculation`: the engine's drafting method, built from `--speculative-config`.

use super::draft_model_proposer::{DraftModelProposer, DraftModelSpec};
use super::ngram_proposer::NgramProposer;
use super::proposer::Proposer;
use super::suffix_proposer::SuffixProposer;
use crate::config::{SpeculativeConfig, SpeculativeMethod, WeightMode};
use crate::error::Result;

pub struct Speculation {
    pub proposer: Box<dyn Proposer>,
    /// The most drafts one sequence verifies per step.
    pub num_speculative_tokens: usize,
}

/// What building a proposer needs to know about the target engine.
pub struct TargetShape {
    pub weight_mode: WeightMode,
    pub max_model_len: usize,
    pub kv_tokens: usize,
    pub vocab_size: usize,
}

impl Speculation {
    /// Builds the configured proposer (loading a draft model, for `draft_model`).
    pub fn new(config: &SpeculativeConfig, target: &TargetShape) -> Result<Self> {
        let proposer: Box<dyn Proposer> = match &config.method {
            SpeculativeMethod::Ngram {
                prompt_lookup_min,
                prompt_lookup_max,
            } => Box::new(NgramProposer::new(*prompt_lookup_min, *prompt_lookup_max)),
            SpeculativeMethod::DraftModel {
                model,
                hf_overrides,
            } => Box::new(DraftModelProposer::load(&DraftModelSpec {
                path: model.as_ref(),
                hf_overrides: hf_overrides.as_ref(),
                weight_mode: target.weight_mode,
                max_model_len: target.max_model_len,
                kv_tokens: target.kv_tokens,
                vocab_size: target.vocab_size,
            })?),
            SpeculativeMethod::Suffix(settings) => {
                Box::new(SuffixProposer::from_settings(settings))
            }
        };
        Ok(Self {
            proposer,
            num_speculative_tokens: config.num_speculative_tokens,
        })
    }
}
