//! `Speculation`: the engine's drafting method, built from `--speculative-config`.

use super::ngram_proposer::NgramProposer;
use super::proposer::Proposer;
use crate::config::{SpeculativeConfig, SpeculativeMethod};

pub struct Speculation {
    pub proposer: Box<dyn Proposer>,
    /// The most drafts one sequence verifies per step.
    pub num_speculative_tokens: usize,
}

impl Speculation {
    pub fn new(config: &SpeculativeConfig) -> Self {
        let proposer: Box<dyn Proposer> = match &config.method {
            SpeculativeMethod::Ngram {
                prompt_lookup_min,
                prompt_lookup_max,
            } => Box::new(NgramProposer::new(*prompt_lookup_min, *prompt_lookup_max)),
            SpeculativeMethod::Suffix(_) | SpeculativeMethod::DraftModel { .. } => {
                unreachable!("EngineConfig::plan refuses methods not built in")
            }
        };
        Self {
            proposer,
            num_speculative_tokens: config.num_speculative_tokens,
        }
    }
}
