//! `EngineLimits`: static facts about a loaded engine that requests are checked against
//! before they are queued.

use crate::config::KvCapacity;
use crate::error::{EngineError, Result};
use crate::sched::request::{EmbedRequest, EngineRequest, Request};

/// Static facts about a loaded engine that callers validate requests against.
#[derive(Debug, Clone)]
pub struct EngineLimits {
    pub vocab_size: usize,
    pub max_model_len: usize,
    /// Pages in the KV pool (a block of tokens of one KV cache group's layers each).
    pub num_kv_blocks: usize,
    pub block_size: usize,
    /// What the pool holds in tokens, at short context and for one sequence alone.
    pub kv_capacity: KvCapacity,
    pub max_waiting: usize,
    pub eos_token_ids: Vec<u32>,
}

impl EngineLimits {
    /// Checks a request of either kind before it is queued.
    pub fn validate_request(&self, req: &EngineRequest) -> Result<()> {
        match req {
            EngineRequest::Generate(req) => self.validate(req),
            EngineRequest::Embed(req) => self.validate_embedding(req),
        }
    }

    /// Checks an embedding request: a prompt of known ids that fits the context (it
    /// generates nothing, so it may fill it) and the pool.
    pub fn validate_embedding(&self, req: &EmbedRequest) -> Result<()> {
        self.validate_prompt(&req.prompt)?;
        if req.prompt.len() > self.max_model_len {
            return Err(EngineError::InvalidRequest(format!(
                "the input has {} tokens but max_model_len is {}",
                req.prompt.len(),
                self.max_model_len
            )));
        }
        if req.prompt.len() > self.kv_capacity.one_sequence {
            return Err(EngineError::InvalidRequest(format!(
                "the input needs {} tokens of KV cache but the pool holds {} for one sequence",
                req.prompt.len(),
                self.kv_capacity.one_sequence
            )));
        }
        Ok(())
    }

    /// A prompt is not empty and names only ids of the vocabulary.
    fn validate_prompt(&self, prompt: &[u32]) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if prompt.is_empty() {
            return bad("the prompt is empty".into());
        }
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return bad(format!(
                "token id {t} is outside the vocabulary (size {})",
                self.vocab_size
            ));
        }
        Ok(())
    }

    /// Checks a request against the model and pool before it is queued.
    pub fn validate(&self, req: &Request) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        req.params.validate()?;
        self.validate_prompt(&req.prompt)?;
        if let Some(t) = req.params.logit_bias.max_token_id() {
            if t as usize >= self.vocab_size {
                return bad(format!(
                    "logit_bias names token id {t}, outside the vocabulary (size {})",
                    self.vocab_size
                ));
            }
        }
        if req.prompt.len() >= self.max_model_len {
            return bad(format!(
                "the prompt has {} tokens but max_model_len is {}, leaving no room to generate",
                req.prompt.len(),
                self.max_model_len
            ));
        }
        // A request must fit the pool alone, or preemption could never make room for it.
        let longest = (req.prompt.len() + req.params.max_tokens).min(self.max_model_len);
        if longest > self.kv_capacity.one_sequence {
            return bad(format!(
                "the request may need {longest} tokens of KV cache but the pool holds {} for one sequence",
                self.kv_capacity.one_sequence
            ));
        }
        Ok(())
    }
}
