//! `Engine`: the engine core. Owns every sequence; each `step` is schedule → run → update.
//!
//! It is single-threaded by design: `EngineHandle` runs it on its own OS thread and talks
//! to it with commands.

use crate::config::EngineConfig;
use crate::core::completion::{collect_completion, Completion};
use crate::core::engine_limits::EngineLimits;
use crate::core::step_times::{StepClock, StepTimes};
use crate::error::{EngineError, Result};
use crate::kernels::compute_pool::{ComputePool, Priority};
use crate::kernels::cpu_kernel::CpuKernel;
use crate::kernels::huge_buf;
use crate::kv::block_manager::BlockManager;
use crate::kv::kv_event::KvEventSink;
use crate::models::checkpoint::Checkpoint;
use crate::models::DecoderModel;
use crate::sample::rejection_sampler::{RejectionSampler, SamplingRows, ScoringRows};
use crate::sample::sampled_token::SampledToken;
use crate::sample::sampling_params::SamplingParams;
use crate::sample::token_constraint::ConstraintError;
use crate::sched::moe_expert_stats::MoeExpertStats;
use crate::sched::request::{
    EmbedRequest, EngineRequest, FinishReason, Request, RequestEvent, RequestTimings, SeqId,
};
use crate::sched::scheduler::{Scheduler, SchedulerConfig};
use crate::sched::scheduler_output::{SchedulerOutput, SeqUpdate};
use crate::sched::scheduler_stats::SchedulerStats;
use crate::sched::sequence::Sequence;
use crate::spec_decode::speculation::{Speculation, TargetShape};
use crate::worker::model_runner::{Logits, ModelRunner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

mod offload;

/// Test support: runs before every forward pass with the batch about to run. An `Err` or a
/// panic from it is handled exactly like one from the model, so tests can exercise the
/// failure path of a real engine.
pub type StepFault =
    Box<dyn FnMut(&crate::forward_batch::ForwardBatch) -> Result<()> + Send + Sync>;

pub struct Engine {
    runner: ModelRunner,
    scheduler: Scheduler,
    limits: EngineLimits,
    streams: HashMap<SeqId, UnboundedSender<RequestEvent>>,
    next_seq: u64,
    seeds: StdRng,
    /// The sequences of the step under way; what `fail_step` finishes if it fails.
    in_flight: Vec<SeqId>,
    fault: Option<StepFault>,
    times: StepTimes,
    /// Mixture-of-experts models only.
    moe_experts: Option<MoeExpertStats>,
    /// Where each step's prefix-cache events go; `None`: none are recorded.
    kv_events: Option<KvEventSink>,
    /// The drafting method and how many drafts a sequence may verify per step; `None`:
    /// no speculative decoding.
    speculation: Option<Speculation>,
}

impl Engine {
    /// Validates `config` against the checkpoint's model (see `EngineConfig::plan`), then loads.
    pub fn load(ckpt: &mut dyn Checkpoint, config: EngineConfig) -> Result<Self> {
        let plan = config.plan(ckpt.config())?;
        let model = DecoderModel::load(ckpt, config.weight_mode, plan.max_model_len)?;
        // Fixes the CPU kernel path now, so its log line comes with the other startup lines.
        CpuKernel::active();
        tracing::info!(
            "weights: on huge pages where the system allows ({})",
            huge_buf::transparent_huge_pages()
        );
        let groups = model.config().kv_cache_groups();
        tracing::info!(
            "KV cache: {:?}, {} blocks of {} tokens in {} group(s) of {} layer(s) ({} sliding): \
             {} tokens at short context, one sequence up to {} tokens",
            config.kv_cache_dtype.resolve(),
            plan.num_blocks,
            config.block_size,
            groups.num_groups(),
            groups.group_size(),
            (0..groups.num_groups())
                .filter(|&g| groups.window(g).is_some())
                .count(),
            plan.capacity.short_context,
            plan.capacity.one_sequence,
        );
        let speculation = match &config.speculative {
            Some(spec) => Some(Speculation::new(
                spec,
                &TargetShape {
                    weight_mode: config.weight_mode,
                    max_model_len: plan.max_model_len,
                    kv_tokens: plan.capacity.short_context,
                    vocab_size: model.config().vocab_size,
                },
            )?),
            None => None,
        };
        let mut engine = Self::new(model, plan, &config, speculation);
        if config.target_itl.is_some() {
            engine.calibrate(config.max_num_batched_tokens)?;
        }
        Ok(engine)
    }

    /// Runs throwaway requests of several sizes so the step cost model knows this machine
    /// before real requests come: a fresh server facing a burst runs its costliest steps
    /// first, and an untrained model cannot ration them. Counters start from zero after.
    fn calibrate(&mut self, budget: usize) -> Result<()> {
        let pool = self.limits.kv_capacity.short_context;
        let longest = budget
            .min(self.limits.max_model_len.saturating_sub(4))
            .min(pool.saturating_sub(4 + self.limits.block_size));
        let vocab = self.limits.vocab_size.max(1);
        let request = |len: usize, salt: usize| Request {
            prompt: (0..len)
                .map(|i| ((i * 7919 + salt * 104_729 + 13) % vocab) as u32)
                .collect(),
            params: SamplingParams {
                ignore_eos: true,
                ..SamplingParams::greedy(3)
            },
            priority: 0,
            constraint: None,
        };
        // Full, half and quarter budget steps, then a few short prompts decoding together.
        for (salt, len) in [longest, longest / 2, longest / 4].into_iter().enumerate() {
            if len > 0 {
                self.generate(vec![request(len, salt)])?;
            }
        }
        let short = (0..8).map(|salt| request(longest.clamp(1, 8), 10 + salt));
        self.generate(short.collect())?;
        self.scheduler.reset_stats();
        self.times = StepTimes::default();
        if let Some(moe) = &mut self.moe_experts {
            *moe = MoeExpertStats::new(moe.num_experts);
        }
        Ok(())
    }

    fn new(
        model: DecoderModel,
        plan: crate::config::KvPlan,
        config: &EngineConfig,
        speculation: Option<Speculation>,
    ) -> Self {
        let (num_blocks, max_model_len) = (plan.num_blocks, plan.max_model_len);
        let c = model.config();
        let moe_experts = c.moe.as_ref().map(|m| MoeExpertStats::new(m.num_experts));
        let limits = EngineLimits {
            vocab_size: c.vocab_size,
            max_model_len,
            num_kv_blocks: num_blocks,
            block_size: config.block_size,
            kv_capacity: plan.capacity,
            max_waiting: config.max_waiting,
            eos_token_ids: c.eos_token_ids.clone(),
        };
        let scheduler = Scheduler::new(
            SchedulerConfig {
                max_num_batched_tokens: config.max_num_batched_tokens,
                max_num_seqs: config.max_num_seqs,
                prefill_limits: config.prefill_limits(max_model_len),
                policy: config.policy,
                max_model_len,
                eos_token_ids: c.eos_token_ids.clone(),
                target_itl: config.target_itl,
            },
            BlockManager::with_groups(
                num_blocks,
                config.block_size,
                config.enable_prefix_caching,
                c.kv_cache_groups(),
            ),
        );
        let rows_per_seq = 1 + speculation.as_ref().map_or(0, |s| s.num_speculative_tokens);
        let logit_rows = (config.max_num_seqs * rows_per_seq).min(config.max_num_batched_tokens);
        let mut runner =
            ModelRunner::new(model, num_blocks, config.block_size, config.kv_cache_dtype);
        runner.reserve(
            config.max_num_batched_tokens,
            logit_rows.max(config.max_num_seqs),
        );
        Self {
            runner,
            scheduler,
            limits,
            streams: HashMap::new(),
            next_seq: 0,
            seeds: StdRng::from_os_rng(),
            in_flight: Vec::new(),
            fault: None,
            times: StepTimes::default(),
            moe_experts,
            kv_events: None,
            speculation,
        }
    }

    pub fn limits(&self) -> &EngineLimits {
        &self.limits
    }

    /// Weight bytes one single-sequence decode step reads (`None` for sparse models): the
    /// numerator of the decode roofline.
    pub fn decode_weight_bytes(&self) -> Option<usize> {
        self.runner.model().decode_weight_bytes()
    }

    /// Operations of one prompt token's matmuls (`None` for sparse models): the numerator of
    /// the prefill roofline.
    pub fn prompt_token_ops(&self) -> Option<usize> {
        self.runner.model().prompt_token_ops()
    }

    pub fn model_config(&self) -> &crate::config::model_config::ModelConfig {
        self.runner.model().config()
    }

    /// The scheduler's counters, plus the experts per step of a mixture-of-experts model.
    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            moe_active_experts: self.moe_experts.clone(),
            kv_offload: self.kv_offload_stats().unwrap_or_default(),
            ..self.scheduler.stats()
        }
    }

    /// Reports every change to the prefix cache's set of blocks to `sink`, once per step
    /// (never an empty batch). The first batch, handed over at once, says what is cached
    /// already (see [`BlockManager::enable_events`]), so applying every batch in order
    /// rebuilds the set exactly.
    pub fn set_kv_event_sink(&mut self, sink: KvEventSink) {
        self.scheduler.block_manager_mut().enable_events();
        if let Some(tier) = self.scheduler.disk_tier() {
            tier.record_changes();
        }
        self.kv_events = Some(sink);
        self.publish_kv_events();
    }

    /// The external hashes of every block the prefix cache can hand out by content (the set
    /// the events describe).
    pub fn cached_block_hashes(&self) -> Vec<u64> {
        self.scheduler.block_manager().cached_hashes()
    }

    /// Hands the events recorded since the last call to the sink, if there is one.
    fn publish_kv_events(&mut self) {
        if self.kv_events.is_none() {
            return;
        }
        let mut events = self.scheduler.block_manager_mut().take_events();
        events.extend(self.disk_events());
        if let Some(sink) = self.kv_events.as_mut().filter(|_| !events.is_empty()) {
            sink(events);
        }
    }

    pub fn has_unfinished(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// Idle work: backs the next slice of the KV pool's pages so later steps do not fault
    /// them in ([`KvCache::fault_in_next`](crate::kv::kv_cache::KvCache::fault_in_next));
    /// `false` once the whole pool is backed. Call it only between steps.
    pub fn fault_in_kv(&mut self) -> bool {
        self.runner.fault_in_kv()
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

    /// Queues an embedding request; its vector arrives on the returned receiver
    /// ([`RequestEvent::Embedding`], then `Finished`).
    pub fn add_embedding(
        &mut self,
        req: EmbedRequest,
    ) -> Result<(SeqId, UnboundedReceiver<RequestEvent>)> {
        let (tx, rx) = unbounded_channel();
        let id = self.enqueue(req, tx, Instant::now())?;
        Ok((id, rx))
    }

    /// Queues a request (to generate or to embed) whose channel and arrival time the
    /// caller made.
    pub fn enqueue(
        &mut self,
        req: impl Into<EngineRequest>,
        events: UnboundedSender<RequestEvent>,
        arrival: Instant,
    ) -> Result<SeqId> {
        let req = req.into();
        self.limits.validate_request(&req)?;
        if self.scheduler.num_waiting() >= self.limits.max_waiting {
            return Err(EngineError::Overloaded(self.limits.max_waiting));
        }
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        let seq = match req {
            EngineRequest::Generate(req) => {
                let seed = req.params.seed.unwrap_or_else(|| self.seeds.random());
                Sequence::new(id, *req, seed, arrival)
            }
            EngineRequest::Embed(req) => Sequence::embedding(id, req, arrival),
        };
        self.scheduler.add(seq);
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
        let started = Instant::now();
        let mut clock = StepClock::start();
        let mut times = self.times;
        self.abort_abandoned();
        self.propose_drafts();
        self.load_pages()?;
        let out = self.scheduler.schedule();
        if out.is_empty() {
            // Only prompts waiting on disk reads (or on pages): wait for a read, not spin.
            self.scheduler.wait_for_loads();
            return Ok(0);
        }
        self.in_flight = out.chunks.iter().map(|c| c.seq_id).collect();
        // Another model's engine may share the compute threads: a decode-only step has them
        // to itself (after a prefill's turn), a step carrying prefill runs in turns beside it.
        let _step = ComputePool::global().step(if out.batch.is_decode_only() {
            Priority::Latency
        } else {
            Priority::Throughput
        });
        clock.lap(&mut times.schedule);
        if let Some(fault) = &mut self.fault {
            fault(&out.batch)?;
        }
        self.runner.execute(&out.batch)?;
        if let (Some(moe), Some(active)) = (
            &mut self.moe_experts,
            self.runner.model().last_active_experts(),
        ) {
            moe.observe(active);
        }
        clock.lap(&mut times.forward);
        let hidden_size = self.runner.model().config().hidden_size;
        self.scheduler
            .pool_hidden(&out, self.runner.hidden(), hidden_size);
        let (prompt_scores, sampled) = self.sample(&out, self.runner.logits());
        clock.lap(&mut times.sample);
        // Before `update`: the prompt's scores reach a stream ahead of the token sampled after it.
        self.send_prompt_logprobs(prompt_scores);
        let sampled = self.end_failed_constraints(sampled);
        let updates = self.scheduler.update(&out, sampled);
        // The gap between this step's tokens and the previous ones: what the target bounds.
        self.scheduler.observe_step(&out, started.elapsed());
        self.dispatch(updates);
        self.offload_blocks();
        self.publish_kv_events();
        self.in_flight.clear();
        clock.lap(&mut times.update);
        times.steps += 1;
        self.times = times;
        Ok(out.num_tokens())
    }

    /// Drafts for the decodes that may verify some this step (speculative decoding only).
    fn propose_drafts(&mut self) {
        let Some(spec) = &mut self.speculation else {
            return;
        };
        for (id, most) in self.scheduler.draft_candidates(spec.num_speculative_tokens) {
            let seq = self.scheduler.get(id).expect("candidates are running");
            let mut drafts = spec.proposer.propose(id, &seq.tokens, seq.prompt_len, most);
            drafts.truncate(most);
            self.scheduler.set_drafts(id, drafts);
        }
    }

    /// Time per phase summed over every step so far.
    pub fn step_times(&self) -> StepTimes {
        self.times
    }

    /// After `step` returned an error or panicked: finishes the failed step's requests with
    /// `FinishReason::Error` and frees their blocks, so the engine can go on with the rest.
    pub fn fail_step(&mut self) {
        // What the failed step evicted before it failed is gone all the same.
        self.publish_kv_events();
        for id in std::mem::take(&mut self.in_flight) {
            match self.scheduler.abort(id) {
                Some(mut seq) => {
                    seq.finish = Some(FinishReason::Error);
                    self.finish(seq);
                }
                // Gone from the scheduler mid-update: only its stream is left to end.
                None => self.end_stream_with_error(id),
            }
        }
    }

    /// Ends, with an error, each sequence whose constraint failed this step (a grammar that
    /// ran out of its parser's limits); the rest go on to `update`.
    fn end_failed_constraints(
        &mut self,
        sampled: Vec<(
            SeqId,
            std::result::Result<Vec<SampledToken>, ConstraintError>,
        )>,
    ) -> Vec<(SeqId, Vec<SampledToken>)> {
        let mut ok = Vec::with_capacity(sampled.len());
        for (id, result) in sampled {
            match result {
                Ok(token) => ok.push((id, token)),
                Err(error) => {
                    tracing::warn!("request {}: {error}", id.0);
                    if let Some(mut seq) = self.scheduler.abort(id) {
                        seq.finish = Some(FinishReason::Error);
                        self.finish(seq);
                    }
                }
            }
        }
        ok
    }

    fn end_stream_with_error(&mut self, id: SeqId) {
        if let Some(tx) = self.streams.remove(&id) {
            let _ = tx.send(RequestEvent::Finished {
                reason: FinishReason::Error,
                prompt_tokens: 0,
                completion_tokens: 0,
                cached_prompt_tokens: 0,
                timings: Box::new(RequestTimings::new(Instant::now())),
            });
        }
    }

    /// Test support: verifies every proposed draft, whatever the step cost model says.
    #[doc(hidden)]
    pub fn keep_all_drafts(&mut self) {
        self.scheduler.keep_all_drafts();
    }

    /// Installs a `StepFault` (tests only).
    #[doc(hidden)]
    pub fn set_step_fault(&mut self, fault: StepFault) {
        self.fault = Some(fault);
    }

    /// Samples each sampling chunk's tokens, and scores the prompt positions chunks asked
    /// logits for. Logit rows come per chunk: its prompt rows, then its sampled rows.
    #[allow(clippy::type_complexity)]
    fn sample(
        &self,
        out: &SchedulerOutput,
        logits: &Logits,
    ) -> (
        Vec<(SeqId, Vec<SampledToken>)>,
        Vec<(
            SeqId,
            std::result::Result<Vec<SampledToken>, ConstraintError>,
        )>,
    ) {
        let (mut sampling, mut scoring) = (Vec::new(), Vec::new());
        let (mut sampling_ids, mut scoring_ids) = (Vec::new(), Vec::new());
        let mut row = 0;
        for chunk in &out.chunks {
            let seq = self
                .scheduler
                .get(chunk.seq_id)
                .expect("scheduled sequences are running");
            if !chunk.prompt_logits.is_empty() {
                scoring_ids.push(chunk.seq_id);
                scoring.push(ScoringRows {
                    tokens: &seq.tokens,
                    top_k: seq.params.prompt_logprobs.unwrap_or(0),
                    positions: chunk.prompt_logits.clone(),
                    first_row: row,
                });
                row += chunk.prompt_logits.len();
            }
            if chunk.sample {
                sampling_ids.push(chunk.seq_id);
                sampling.push(SamplingRows {
                    tokens: &seq.tokens,
                    prompt_len: seq.prompt_len,
                    params: &seq.params,
                    seed: seq.seed,
                    drafts: &seq.drafts[..chunk.drafts],
                    constraint: seq.constraint.as_ref(),
                    first_row: row,
                });
                row += 1 + chunk.drafts;
            }
        }
        let sampler = RejectionSampler::new(&logits.data, logits.vocab, &self.limits.eos_token_ids);
        let prompt_scores = if scoring.is_empty() {
            Vec::new()
        } else {
            scoring_ids
                .into_iter()
                .zip(sampler.score_prompts(&scoring))
                .collect()
        };
        let sampled = sampling_ids
            .into_iter()
            .zip(sampler.sample(&sampling))
            .collect();
        (prompt_scores, sampled)
    }

    fn send_prompt_logprobs(&self, scores: Vec<(SeqId, Vec<SampledToken>)>) {
        for (id, logprobs) in scores {
            if let Some(tx) = self.streams.get(&id) {
                let _ = tx.send(RequestEvent::PromptLogprobs { logprobs });
            }
        }
    }

    fn dispatch(&mut self, updates: Vec<SeqUpdate>) {
        for update in updates {
            if let Some(tx) = self.streams.get(&update.seq_id) {
                // A closed receiver is noticed by `abort_abandoned` next step.
                for token in update.tokens {
                    let _ = tx.send(RequestEvent::Token {
                        token,
                        time: update.time,
                    });
                }
            }
            if let Some(seq) = update.finished {
                self.finish(seq);
            }
        }
    }

    fn finish(&mut self, seq: Sequence) {
        if let Some(spec) = &mut self.speculation {
            spec.proposer.finished(seq.id, &seq.tokens, seq.prompt_len);
        }
        if let Some(tx) = self.streams.remove(&seq.id) {
            if let (Some(pool), Some(FinishReason::Stop)) = (&seq.pool, seq.finish) {
                let _ = tx.send(RequestEvent::Embedding {
                    values: pool.vector(),
                });
            }
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

    /// Embeds `requests` (offline): runs them to completion and returns their vectors in
    /// request order.
    pub fn embed(&mut self, requests: Vec<EmbedRequest>) -> Result<Vec<Vec<f32>>> {
        let mut receivers = Vec::with_capacity(requests.len());
        for req in requests {
            receivers.push(self.add_embedding(req)?.1);
        }
        while self.has_unfinished() {
            self.step()?;
        }
        receivers
            .into_iter()
            .map(|mut rx| {
                while let Ok(event) = rx.try_recv() {
                    match event {
                        RequestEvent::Embedding { values } => return Ok(values),
                        RequestEvent::Finished { reason, .. } => {
                            return Err(EngineError::InvalidRequest(format!(
                                "the embedding ended without a vector ({})",
                                reason.as_str()
                            )))
                        }
                        _ => {}
                    }
                }
                Err(EngineError::EngineStopped)
            })
            .collect()
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
