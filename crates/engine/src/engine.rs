//! `Engine`: the engine core. Owns every sequence; each `step` is schedule → run → update.
//!
//! It is single-threaded by design: `EngineHandle` runs it on its own OS thread and talks
//! to it with commands.

use crate::block_manager::BlockManager;
use crate::checkpoint::Checkpoint;
use crate::error::{EngineError, Result};
use crate::kv_cache::KvCacheDtype;
use crate::model_runner::{Logits, ModelRunner};
use crate::models::{Llama, WeightMode};
use crate::request::{FinishReason, Request, RequestEvent, RequestTimings, SeqId};
use crate::sampler::{SampledToken, Sampler, SamplingContext};
use crate::scheduler::{
    Scheduler, SchedulerConfig, SchedulerOutput, SchedulerStats, SchedulingPolicy, SeqUpdate,
};
use crate::sequence::Sequence;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use std::collections::HashMap;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub block_size: usize,
    /// Exact pool size; when `None` it is `kv_cache_memory_bytes` worth of blocks.
    pub num_kv_blocks: Option<usize>,
    pub kv_cache_memory_bytes: usize,
    /// Element type of the KV cache; `Auto` is f16, so the same memory holds twice the
    /// tokens of f32.
    pub kv_cache_dtype: KvCacheDtype,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// Defaults to the model's context length, capped by what the KV pool holds.
    pub max_model_len: Option<usize>,
    pub long_prefill_token_threshold: Option<usize>,
    pub enable_prefix_caching: bool,
    pub policy: SchedulingPolicy,
    pub weight_mode: WeightMode,
    /// Requests allowed to wait before new ones are refused.
    pub max_waiting: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            block_size: 16,
            num_kv_blocks: None,
            kv_cache_memory_bytes: 2 << 30,
            kv_cache_dtype: KvCacheDtype::Auto,
            max_num_batched_tokens: 512,
            max_num_seqs: 128,
            max_model_len: None,
            long_prefill_token_threshold: None,
            enable_prefix_caching: true,
            policy: SchedulingPolicy::Fcfs,
            weight_mode: WeightMode::Quantized,
            max_waiting: 1024,
        }
    }
}

/// Static facts about a loaded engine that callers validate requests against.
#[derive(Debug, Clone)]
pub struct EngineLimits {
    pub vocab_size: usize,
    pub max_model_len: usize,
    pub num_kv_blocks: usize,
    pub block_size: usize,
    pub max_waiting: usize,
    pub eos_token_ids: Vec<u32>,
}

impl EngineLimits {
    /// Checks a request against the model and pool before it is queued.
    pub fn validate(&self, req: &Request) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        req.params.validate()?;
        if req.prompt.is_empty() {
            return bad("the prompt is empty".into());
        }
        if let Some(&t) = req.prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return bad(format!(
                "token id {t} is outside the vocabulary (size {})",
                self.vocab_size
            ));
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
        if longest.div_ceil(self.block_size) > self.num_kv_blocks {
            return bad(format!(
                "the request may need {longest} tokens of KV cache but the pool holds {}",
                self.num_kv_blocks * self.block_size
            ));
        }
        Ok(())
    }
}

/// Everything about one finished request, for offline use (`generate`, tests).
#[derive(Debug, Clone)]
pub struct Completion {
    pub prompt_tokens: usize,
    pub tokens: Vec<SampledToken>,
    pub finish_reason: FinishReason,
    pub cached_prompt_tokens: usize,
    pub timings: RequestTimings,
}

impl Completion {
    pub fn token_ids(&self) -> Vec<u32> {
        self.tokens.iter().map(|t| t.token_id).collect()
    }
}

pub struct Engine {
    runner: ModelRunner,
    scheduler: Scheduler,
    limits: EngineLimits,
    streams: HashMap<SeqId, UnboundedSender<RequestEvent>>,
    next_seq: u64,
    seeds: StdRng,
}

impl Engine {
    pub fn load(ckpt: &mut dyn Checkpoint, config: EngineConfig) -> Result<Self> {
        let model_config = ckpt.config().clone();
        let num_blocks = match config.num_kv_blocks {
            Some(n) => n,
            None => {
                config.kv_cache_memory_bytes
                    / (model_config.kv_bytes_per_token(config.kv_cache_dtype.element_size())
                        * config.block_size)
            }
        };
        if num_blocks == 0 || config.block_size == 0 {
            return Err(EngineError::InvalidConfig(
                "the KV cache has no blocks".into(),
            ));
        }
        let pool_tokens = num_blocks * config.block_size;
        let max_model_len = match config.max_model_len {
            Some(len) if len > model_config.max_position_embeddings => {
                return Err(EngineError::InvalidConfig(format!(
                    "max_model_len {len} exceeds the model's context length {}",
                    model_config.max_position_embeddings
                )))
            }
            Some(len) => len,
            None => model_config.max_position_embeddings.min(pool_tokens),
        };
        let model = Llama::load(ckpt, config.weight_mode, max_model_len)?;
        tracing::info!(
            "KV cache: {:?}, {num_blocks} blocks of {} tokens ({pool_tokens} tokens)",
            config.kv_cache_dtype.resolve(),
            config.block_size
        );
        Ok(Self::new(model, num_blocks, max_model_len, &config))
    }

    fn new(model: Llama, num_blocks: usize, max_model_len: usize, config: &EngineConfig) -> Self {
        let c = model.config();
        let limits = EngineLimits {
            vocab_size: c.vocab_size,
            max_model_len,
            num_kv_blocks: num_blocks,
            block_size: config.block_size,
            max_waiting: config.max_waiting,
            eos_token_ids: c.eos_token_ids.clone(),
        };
        let scheduler = Scheduler::new(
            SchedulerConfig {
                max_num_batched_tokens: config.max_num_batched_tokens,
                max_num_seqs: config.max_num_seqs,
                long_prefill_token_threshold: config.long_prefill_token_threshold,
                policy: config.policy,
                max_model_len,
                eos_token_ids: c.eos_token_ids.clone(),
            },
            BlockManager::new(num_blocks, config.block_size, config.enable_prefix_caching),
        );
        Self {
            runner: ModelRunner::new(model, num_blocks, config.block_size, config.kv_cache_dtype),
            scheduler,
            limits,
            streams: HashMap::new(),
            next_seq: 0,
            seeds: StdRng::from_os_rng(),
        }
    }

    pub fn limits(&self) -> &EngineLimits {
        &self.limits
    }

    pub fn model_config(&self) -> &crate::model_config::ModelConfig {
        self.runner.model().config()
    }

    pub fn stats(&self) -> SchedulerStats {
        self.scheduler.stats()
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn has_unfinished(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// Queues a request; its events arrive on the returned receiver.
    pub fn add_request(
        &mut self,
        req: Request,
    ) -> Result<(SeqId, UnboundedReceiver<RequestEvent>)> {
        let (tx, rx) = unbounded_channel();
        let id = self.enqueue(req, tx, Instant::now())?;
        Ok((id, rx))
    }

    /// Queues a request whose channel and arrival time the caller made.
    pub fn enqueue(
        &mut self,
        req: Request,
        events: UnboundedSender<RequestEvent>,
        arrival: Instant,
    ) -> Result<SeqId> {
        self.limits.validate(&req)?;
        if self.scheduler.num_waiting() >= self.limits.max_waiting {
            return Err(EngineError::Overloaded(self.limits.max_waiting));
        }
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        let seed = req.params.seed.unwrap_or_else(|| self.seeds.random());
        self.scheduler.add(Sequence::new(id, req, seed, arrival));
        self.streams.insert(id, events);
        Ok(id)
    }

    /// Cancels a request; its blocks are free before the next step.
    pub fn abort(&mut self, id: SeqId) {
        if let Some(seq) = self.scheduler.abort(id) {
            self.finish(seq);
        }
    }

    /// One engine iteration. Returns how many tokens the forward pass computed.
    pub fn step(&mut self) -> Result<usize> {
        self.abort_abandoned();
        let out = self.scheduler.schedule();
        if out.is_empty() {
            return Ok(0);
        }
        let logits = self.runner.execute(&out.batch)?;
        let sampled = self.sample(&out, &logits);
        let updates = self.scheduler.update(&out, sampled);
        self.dispatch(updates);
        Ok(out.num_tokens())
    }

    fn sample(&self, out: &SchedulerOutput, logits: &Logits) -> Vec<(SeqId, SampledToken)> {
        let sampling: Vec<_> = out
            .chunks
            .iter()
            .filter(|c| c.sample)
            .map(|c| c.seq_id)
            .collect();
        sampling
            .par_iter()
            .enumerate()
            .map(|(row, &id)| {
                let seq = self
                    .scheduler
                    .get(id)
                    .expect("scheduled sequences are running");
                let banned = self.scheduler.banned_tokens(seq);
                let ctx = SamplingContext {
                    params: &seq.params,
                    prompt: seq.prompt(),
                    output: seq.output(),
                    seed: seq.seed,
                    banned: &banned,
                };
                (id, Sampler::sample(logits.row(row), &ctx))
            })
            .collect()
    }

    fn dispatch(&mut self, updates: Vec<SeqUpdate>) {
        for update in updates {
            if let Some(tx) = self.streams.get(&update.seq_id) {
                // A closed receiver is noticed by `abort_abandoned` next step.
                let _ = tx.send(RequestEvent::Token {
                    token: update.token,
                    time: update.time,
                });
            }
            if let Some(seq) = update.finished {
                self.finish(seq);
            }
        }
    }

    fn finish(&mut self, seq: Sequence) {
        if let Some(tx) = self.streams.remove(&seq.id) {
            let _ = tx.send(RequestEvent::Finished {
                reason: seq.finish.unwrap_or(FinishReason::Abort),
                prompt_tokens: seq.prompt_len,
                completion_tokens: seq.output().len(),
                cached_prompt_tokens: seq.cached_prompt_tokens,
                timings: Box::new(seq.timings),
            });
        }
    }

    /// Requests whose receiver is gone (a client that disconnected) stop consuming blocks.
    fn abort_abandoned(&mut self) {
        let gone: Vec<SeqId> = self
            .streams
            .iter()
            .filter(|(_, tx)| tx.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.abort(id);
        }
    }

    /// Runs requests to completion (offline batch inference), in request order.
    pub fn generate(&mut self, requests: Vec<Request>) -> Result<Vec<Completion>> {
        let mut receivers = Vec::with_capacity(requests.len());
        for req in requests {
            receivers.push(self.add_request(req)?.1);
        }
        while self.has_unfinished() {
            self.step()?;
        }
        receivers
            .into_iter()
            .map(|rx| collect_completion(rx).ok_or(EngineError::EngineStopped))
            .collect()
    }
}

/// Drains a finished request's events into a `Completion`.
/// `None` if the request has not finished.
pub fn collect_completion(mut rx: UnboundedReceiver<RequestEvent>) -> Option<Completion> {
    let mut tokens = Vec::new();
    while let Ok(event) = rx.try_recv() {
        match event {
            RequestEvent::Token { token, .. } => tokens.push(token),
            RequestEvent::Finished {
                reason,
                prompt_tokens,
                cached_prompt_tokens,
                timings,
                ..
            } => {
                return Some(Completion {
                    prompt_tokens,
                    tokens,
                    finish_reason: reason,
                    cached_prompt_tokens,
                    timings: *timings,
                })
            }
        }
    }
    None
}
