//! `Scheduler`: the policy. Each step has one token budget; running sequences close their
//! gap first (in admission order — a decode is just a gap of one), then waiting prompts
//! are admitted in chunks with what is left, and long prompts' chunks come last, sized so
//! the step costs no more than a full budget of fresh prompt tokens would: a short request
//! overtakes a long prefill within a step. When blocks run out, the most recently admitted (or least
//! important) running sequence is preempted and recomputed later. Which drafts a step
//! verifies is in `scheduler/drafts.rs`; applying a step's results, in `scheduler/update.rs`.

mod disk_hits;
mod drafts;
mod update;

use crate::config::{PartialPrefillLimits, SchedulingPolicy};
use crate::kv::block_manager::{BlockHash, BlockManager};
use crate::kv::kv_disk_tier::{KvDiskTier, ReadDone};
use crate::sched::prefill_slots::PrefillSlots;
use crate::sched::request::{FinishReason, SeqId};
use crate::sched::scheduler_output::{ScheduledChunk, SchedulerOutput};
use crate::sched::scheduler_stats::SchedulerStats;
use crate::sched::sequence::Sequence;
use crate::sched::step_cost_model::{StepCostModel, StepShape};
use disk_hits::Loading;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// How many prompts prefill at once, and which are long (capped, and sized by the
    /// step cost model).
    pub prefill_limits: PartialPrefillLimits,
    pub policy: SchedulingPolicy,
    pub max_model_len: usize,
    pub eos_token_ids: Vec<u32>,
    /// Inter-token latency to hold: prefill admitted per step only while the step's
    /// predicted time stays under it (decodes always run). `None`: the budget alone.
    pub target_itl: Option<Duration>,
}

/// Steps a pending prefill may get less than one block before it is given one anyway, so
/// decodes that alone fill the ITL target cannot starve waiting prompts.
pub const MAX_STARVED_STEPS: usize = 4;

pub struct Scheduler {
    config: SchedulerConfig,
    blocks: BlockManager,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    stats: SchedulerStats,
    cost: StepCostModel,
    /// Consecutive steps a pending prefill got less than one block.
    starved_steps: usize,
    /// Test support: verify every proposed draft, whatever the cost model says.
    keep_all_drafts: bool,
    /// The prefix cache's tier on disk (`--kv-offload-dir`); `None`: RAM only.
    disk: Option<KvDiskTier>,
    /// Admitted requests whose prefix is being read back from disk (`scheduler/disk_hits.rs`):
    /// they hold their pages but are in no batch until the read is back.
    loading: Vec<Loading>,
    /// Reads that finished while the engine waited for one, for the next `finish_loads`.
    reads_done: Vec<ReadDone>,
    /// Blocks whose read failed after a lookup found their file, for a model with several
    /// KV cache groups (whose prompt is admitted afresh): never looked for on disk again,
    /// so a file that cannot be deleted (a read-only directory) is not read in a loop.
    failed_on_disk: HashSet<BlockHash>,
}

/// What one step may still schedule: tokens under the hard budget and, of them, prefill
/// tokens (any chunk but a running sequence's single decode token) under the ITL target.
struct StepBudget {
    tokens: usize,
    prefill: usize,
}

/// What the step keeps back for long prompts already prefilling while newcomers are admitted:
/// a block's worth of tokens each, and the blocks they need, so no stream of short requests
/// starves them.
#[derive(Debug, Clone, Copy, Default)]
struct Reserve {
    tokens: usize,
    blocks: usize,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig, blocks: BlockManager) -> Self {
        Self {
            config,
            blocks,
            waiting: VecDeque::new(),
            running: Vec::new(),
            stats: SchedulerStats::default(),
            cost: StepCostModel::default(),
            starved_steps: 0,
            keep_all_drafts: false,
            disk: None,
            loading: Vec::new(),
            reads_done: Vec::new(),
            failed_on_disk: HashSet::new(),
        }
    }

    /// Test support: every proposed draft is verified (the cost model trims none), so tests
    /// of exactness exercise verification in large batches too.
    #[doc(hidden)]
    pub fn keep_all_drafts(&mut self) {
        self.keep_all_drafts = true;
    }

    pub fn block_manager(&self) -> &BlockManager {
        &self.blocks
    }

    /// The block manager, to switch its event record on and take its events (mechanism
    /// only: what is scheduled stays the scheduler's).
    pub fn block_manager_mut(&mut self) -> &mut BlockManager {
        &mut self.blocks
    }

    pub fn add(&mut self, seq: Sequence) {
        self.waiting.push_back(seq);
    }

    pub fn has_unfinished(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || !self.loading.is_empty()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn running(&self) -> &[Sequence] {
        &self.running
    }

    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .chain(self.loading.iter().map(|l| &l.seq))
            .find(|s| s.id == id)
    }

    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            num_running: self.running.len(),
            // A prompt waiting on its disk reads waits, as vLLM counts one waiting for its
            // KV transfer.
            num_waiting: self.waiting.len() + self.loading.len(),
            num_loading: self.loading.len(),
            kv_cache_usage: self.blocks.usage(),
            ..self.stats.clone()
        }
    }

    /// Plans one step within the token budget and lays out its `ForwardBatch`.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut out = SchedulerOutput::default();
        let tokens = self.config.max_num_batched_tokens;
        let prefill = self.prefill_allowance(tokens);
        out.prefill_allowance = self.config.target_itl.map(|_| prefill);
        let mut budget = StepBudget { tokens, prefill };
        // Pages no window sees any more go back first, so this step's chunks (a long
        // prefill's next one included) can reuse them.
        for seq in &mut self.running {
            self.blocks
                .release_outside_window(&mut seq.block_tables, seq.num_computed);
        }
        self.trim_drafts();
        let long = self.schedule_running(&mut budget, &mut out);
        // A step that had to preempt is short of blocks: admitting newcomers would only
        // preempt them again.
        if out.preempted.is_empty() {
            self.schedule_waiting(&long, &mut budget, &mut out);
        }
        self.schedule_long_prefills(&long, &mut budget, &mut out);
        out.prefill_tokens = prefill - budget.prefill;
        self.build_batch(&mut out);
        out.predicted_seconds = self.cost.predict(StepShape::of(&out.chunks));
        out
    }

    /// Records how long a scheduled step took: for the step cost model and the stats.
    pub fn observe_step(&mut self, out: &SchedulerOutput, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        self.cost.observe(StepShape::of(&out.chunks), seconds);
        let stats = &mut self.stats;
        stats.step_seconds.observe(seconds);
        stats.prefill_tokens += out.prefill_tokens as u64;
        if let Some(predicted) = out.predicted_seconds.filter(|_| seconds > 0.0) {
            let error = (predicted - seconds).abs() / seconds;
            stats.step_prediction_error = Some(match stats.step_prediction_error {
                Some(mean) => mean + (error - mean) / 100.0,
                None => error,
            });
        }
    }

    /// Starts the counters afresh (after calibration runs), keeping what the cost model learnt.
    pub fn reset_stats(&mut self) {
        self.stats = SchedulerStats::default();
    }

    pub fn step_cost_model(&self) -> &StepCostModel {
        &self.cost
    }

    /// Prefill tokens this step may take: all the budget leaves after the decodes, or with
    /// an ITL target, the most whose predicted step time stays under it (at least one
    /// block every `MAX_STARVED_STEPS` steps while prefill is pending).
    fn prefill_allowance(&mut self, budget: usize) -> usize {
        let Some(target) = self.config.target_itl else {
            return budget;
        };
        let decodes = self
            .running
            .iter()
            .filter(|s| s.is_decoding())
            .fold(StepShape::default(), |acc, s| {
                acc.plus(StepShape::chunk(s.num_computed, 1 + s.drafts.len()))
            });
        let room = budget.saturating_sub(decodes.tokens);
        let pending = self.running.iter().find(|s| !s.is_decoding());
        if pending.is_none() && self.waiting.is_empty() {
            self.starved_steps = 0;
            return room;
        }
        // Where the next prefill chunk starts: a running prompt's next token, or a new one.
        let start = pending.map_or(0, |s| s.num_computed);
        let target = target.as_secs_f64();
        let fits = |x: usize| {
            self.cost
                .predict_upper(decodes.plus(StepShape::chunk(start, x)))
                .map(|t| t <= target)
        };
        // Until the model has seen enough steps, the hard budget alone.
        let Some(_) = fits(0) else { return room };
        let (mut lo, mut hi) = (0, room);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if fits(mid) == Some(true) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let floor = self.blocks.block_size().min(room);
        if lo >= floor {
            self.starved_steps = 0;
            return lo;
        }
        self.starved_steps += 1;
        if self.starved_steps >= MAX_STARVED_STEPS {
            self.starved_steps = 0;
            return floor;
        }
        lo
    }

    /// Tokens a sequence with `gap` uncomputed tokens gets; prefill (`decode == false`)
    /// is also held to the step's prefill allowance. Zero only when that is spent.
    fn chunk_len(&self, gap: usize, decode: bool, budget: &StepBudget) -> usize {
        let cap = self.config.prefill_limits.chunk_cap();
        let n = gap.min(budget.tokens).min(cap);
        if decode {
            n
        } else {
            n.min(budget.prefill)
        }
    }

    /// Decodes and short prefills of running sequences, in admission order; returns the
    /// long prefills, which wait for the end of the step (`schedule_long_prefills`).
    fn schedule_running(
        &mut self,
        budget: &mut StepBudget,
        out: &mut SchedulerOutput,
    ) -> Vec<SeqId> {
        let mut long = Vec::new();
        let mut i = 0;
        while i < self.running.len() && budget.tokens > 0 {
            let decode = self.running[i].is_decoding();
            if !decode && self.is_deferred(&self.running[i]) {
                long.push(self.running[i].id);
                i += 1;
                continue;
            }
            let drafts = if decode {
                self.running[i].drafts.len()
            } else {
                0
            };
            let mut n = self.chunk_len(self.running[i].gap() + drafts, decode, budget);
            if n == 0 {
                // Prefill allowance spent: this prompt waits; decodes behind it still run.
                i += 1;
                continue;
            }
            let placed = loop {
                let seq = &mut self.running[i];
                let (start, end) = (seq.num_computed, seq.num_computed + n);
                if self.blocks.allocate_to(&mut seq.block_tables, start, end) {
                    break true;
                }
                // Drafts go before anyone is preempted: they only save time.
                if decode && n > 1 {
                    n = 1;
                    continue;
                }
                let victim = self.pick_victim(i);
                self.preempt(victim, out);
                if victim == i {
                    break false;
                }
            };
            if !placed {
                break;
            }
            let seq = &mut self.running[i];
            let drafts = if decode { n - 1 } else { 0 };
            seq.drafts.truncate(drafts);
            out.chunks.push(ScheduledChunk {
                seq_id: seq.id,
                start: seq.num_computed,
                len: n,
                sample: seq.num_computed + n - drafts == seq.tokens.len(),
                drafts,
                prompt_logits: 0..0,
            });
            budget.tokens -= n;
            if !decode {
                budget.prefill -= n;
            }
            i += 1;
        }
        // A preempted long prefill is waiting again, not deferred.
        long.retain(|&id| self.running_index(id).is_some());
        long
    }

    /// A running prefill whose chunk waits for the end of the step and is sized by the cost
    /// model: a long one, or one deep in a long context (its chunks cost the most).
    fn is_deferred(&self, seq: &Sequence) -> bool {
        let limits = &self.config.prefill_limits;
        limits.is_long(seq.gap()) || limits.is_long(seq.num_computed)
    }

    /// What the long prefills in `long` keep back from newcomers.
    fn reserve_for(&self, long: &[SeqId], budget: &StepBudget) -> Reserve {
        let bs = self.blocks.block_size();
        let mut reserve = Reserve::default();
        for i in long.iter().filter_map(|&id| self.running_index(id)) {
            let seq = &self.running[i];
            let room = budget.tokens.min(budget.prefill) - reserve.tokens;
            let n = bs.min(room).min(seq.gap());
            reserve.tokens += n;
            reserve.blocks +=
                self.blocks
                    .pages_needed(&seq.block_tables, seq.num_computed, seq.num_computed + n);
        }
        reserve
    }

    /// The long prefills' chunks, after everyone else's: as many tokens as the budget, the
    /// threshold and the free blocks allow, and no more than keep the step's predicted time
    /// under that of a full budget of fresh prompt tokens (`time_bounded`). Attention makes a
    /// chunk deep in a long context cost several times an early one; without this bound a
    /// step late in an 8,000-token prompt would hold every other request for seconds.
    fn schedule_long_prefills(
        &mut self,
        long: &[SeqId],
        budget: &mut StepBudget,
        out: &mut SchedulerOutput,
    ) {
        for (k, &id) in long.iter().enumerate() {
            let Some(i) = self.running_index(id) else {
                continue;
            };
            // The long prefills after this one keep their reserve here too.
            let later = self.reserve_for(&long[k + 1..], budget);
            let seq = &self.running[i];
            let room = budget.tokens.min(budget.prefill) - later.tokens;
            let start = seq.num_computed;
            let most = self.chunk_len(seq.gap(), false, budget).min(room);
            if most == 0 {
                continue;
            }
            // Tokens the pages it holds and the free ones (less the later prefills' reserve)
            // take it to, counted over every group.
            let fit = |s: &Self, i: usize| {
                let free = s.blocks.num_free().saturating_sub(later.blocks);
                let tables = &s.running[i].block_tables;
                s.blocks.tokens_that_fit(tables, start, most, free)
            };
            // Out of blocks: preempt someone this step has not scheduled, so prefills that
            // hold blocks cannot wait on each other forever.
            if fit(self, i) == 0 && self.preempt_unscheduled(out) == Some(id) {
                continue;
            }
            let Some(i) = self.running_index(id) else {
                continue;
            };
            let n = self
                .time_bounded(start, most, StepShape::of(&out.chunks))
                .min(fit(self, i));
            if n == 0 {
                continue;
            }
            let seq = &mut self.running[i];
            let placed = self
                .blocks
                .allocate_to(&mut seq.block_tables, start, start + n);
            assert!(placed, "sized to the free blocks");
            out.chunks.push(ScheduledChunk {
                seq_id: seq.id,
                start,
                len: n,
                sample: start + n == seq.tokens.len(),
                drafts: 0,
                prompt_logits: 0..0,
            });
            budget.tokens -= n;
            budget.prefill -= n;
        }
    }

    /// The most tokens (at most `most`, at least a block's worth where `most` allows) of a
    /// chunk from `start` that keep a step of `rest` plus it under the predicted time of
    /// `rest` plus a whole budget of fresh prompt tokens: the costliest step the budget allows
    /// at any prompt's start, so no step deep in a long context is worse. (Not a
    /// threshold-sized chunk's time: that bound shrinks chunks deep in a long context to
    /// ~100 tokens, each step rereading the whole context's KV for few queries.) Until
    /// the cost model has seen enough steps, `most`.
    fn time_bounded(&self, start: usize, most: usize, rest: StepShape) -> usize {
        let cost = |s, n| self.cost.predict(rest.plus(StepShape::chunk(s, n)));
        let Some(bound) = cost(0, self.config.max_num_batched_tokens) else {
            return most;
        };
        let floor = self.blocks.block_size().min(most);
        let (mut lo, mut hi) = (floor, most);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if cost(start, mid).is_some_and(|t| t <= bound) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// Index (≥ `from`, among sequences not yet scheduled this step) of the one to preempt.
    fn pick_victim(&self, from: usize) -> usize {
        match self.config.policy {
            SchedulingPolicy::Fcfs => self.running.len() - 1,
            SchedulingPolicy::Priority => (from..self.running.len())
                .max_by_key(|&j| (self.running[j].priority, self.running[j].arrival_seq))
                .unwrap_or(from),
        }
    }

    /// Preempts the running sequence the policy gives up first among those with no chunk
    /// this step; returns it, `None` when every running sequence is scheduled.
    fn preempt_unscheduled(&mut self, out: &mut SchedulerOutput) -> Option<SeqId> {
        let unscheduled = |s: &&Sequence| !out.chunks.iter().any(|c| c.seq_id == s.id);
        let victim = match self.config.policy {
            SchedulingPolicy::Fcfs => self
                .running
                .iter()
                .filter(unscheduled)
                .max_by_key(|s| s.arrival_seq),
            SchedulingPolicy::Priority => self
                .running
                .iter()
                .filter(unscheduled)
                .max_by_key(|s| (s.priority, s.arrival_seq)),
        }?
        .id;
        let index = self.running_index(victim).expect("found among the running");
        self.preempt(index, out);
        Some(victim)
    }

    /// Preemption by recompute: drop the KV, keep the tokens, queue it first.
    fn preempt(&mut self, index: usize, out: &mut SchedulerOutput) {
        let mut seq = self.running.remove(index);
        self.free_blocks(&mut seq);
        seq.num_computed = 0;
        seq.drafts.clear();
        if let Some(pool) = &mut seq.pool {
            pool.reset();
        }
        seq.num_preemptions += 1;
        self.stats.num_preemptions += 1;
        out.preempted.push(seq.id);
        self.waiting.push_front(seq);
    }

    fn free_blocks(&mut self, seq: &mut Sequence) {
        self.blocks.release_all(&mut seq.block_tables);
        seq.block_hashes.clear();
    }

    /// Waiting sequences in the order the policy admits them.
    fn waiting_order(&self) -> Vec<SeqId> {
        let mut order: Vec<&Sequence> = self.waiting.iter().collect();
        if self.config.policy == SchedulingPolicy::Priority {
            order.sort_by_key(|s| (s.priority, s.arrival_seq));
        }
        order.into_iter().map(|s| s.id).collect()
    }

    /// Prompts that stay partial after this step among the running: the deferred long ones
    /// and any short one whose chunk this step does not finish.
    fn partial_slots(&self, long: &[SeqId], out: &SchedulerOutput) -> PrefillSlots {
        let mut slots = PrefillSlots::default();
        for seq in self.running.iter().filter(|s| !s.is_decoding()) {
            let scheduled: usize = out
                .chunks
                .iter()
                .filter(|c| c.seq_id == seq.id)
                .map(|c| c.len)
                .sum();
            if long.contains(&seq.id) || scheduled < seq.gap() {
                slots.take(self.config.prefill_limits.is_long(seq.gap()));
            }
        }
        slots
    }

    /// Admits waiting prompts in policy order with what the budget leaves after the running
    /// and the `long` prefills' reserve. A prompt that would stay partial needs a free
    /// partial slot (and a long one a long slot); one that does not is skipped for the next,
    /// so short requests overtake a long prompt that has to wait for its slot.
    fn schedule_waiting(
        &mut self,
        long: &[SeqId],
        budget: &mut StepBudget,
        out: &mut SchedulerOutput,
    ) {
        let bs = self.blocks.block_size();
        let limits = self.config.prefill_limits;
        let reserve = self.reserve_for(long, budget);
        let mut slots = self.partial_slots(long, out);
        budget.tokens -= reserve.tokens;
        budget.prefill -= reserve.tokens;
        for id in self.waiting_order() {
            if budget.tokens == 0
                || budget.prefill == 0
                || self.running.len() + self.loading.len() >= self.config.max_num_seqs
            {
                break;
            }
            let index = self
                .waiting
                .iter()
                .position(|s| s.id == id)
                .expect("listed");
            let seq = &self.waiting[index];
            let hashes = if self.blocks.prefix_caching() {
                BlockHash::of_full_blocks(&seq.tokens, bs)
            } else {
                Vec::new()
            };
            // Cached positions would have no logits to score the prompt with, nor hidden
            // states to average. At least one token must be computed to produce logits (or
            // the last hidden state); recomputing a whole block (never writing into a shared
            // one) keeps cached blocks read-only.
            let most = match seq.needs_every_position() {
                false => (seq.tokens.len() - 1) / bs,
                true => 0,
            };
            let hit = self.blocks.lookup_prefix(&seq.tokens, &hashes, most);
            // Blocks after the RAM hit that the disk tier holds are read back, not computed:
            // the prompt takes their pages now and waits, out of every batch, for the read.
            let on_disk = self.disk_run(&hashes, hit.blocks, most);
            if on_disk > 0 {
                let end = (hit.blocks + on_disk) * bs;
                let new = self.blocks.pages_needed(&hit.tables, end, end);
                if new + self.blocks.count_free(hit.ids()) + reserve.blocks > self.blocks.num_free()
                {
                    break; // Wait for blocks; newcomers never preempt.
                }
                let mut seq = self.waiting.remove(index).expect("listed");
                for id in hit.ids() {
                    self.blocks.acquire(id);
                }
                seq.block_tables = hit.tables;
                let placed = self.blocks.allocate_to(&mut seq.block_tables, end, end);
                assert!(placed, "checked free count above");
                seq.num_computed = hit.blocks * bs;
                seq.block_hashes = hashes[..hit.blocks].to_vec();
                let first_admission = seq.timings.first_scheduled.is_none();
                if first_admission {
                    seq.timings.first_scheduled = Some(Instant::now());
                }
                self.start_load(Loading {
                    seq,
                    hashes,
                    first: hit.blocks,
                    blocks: on_disk,
                    first_admission,
                });
                continue;
            }
            let cached = hit.blocks * bs;
            let uncomputed = seq.tokens.len() - cached;
            let is_long = limits.is_long(uncomputed);
            let mut n = self.chunk_len(uncomputed, false, budget);
            if is_long {
                n = self.time_bounded(cached, n, StepShape::of(&out.chunks));
            }
            let partial = n < uncomputed;
            if partial && !slots.admits(&limits, is_long) {
                continue;
            }
            let new = self.blocks.pages_needed(&hit.tables, cached, cached + n);
            if new + self.blocks.count_free(hit.ids()) + reserve.blocks > self.blocks.num_free() {
                break; // Wait for blocks; newcomers never preempt.
            }
            if partial {
                slots.take(is_long);
            }
            let mut seq = self.waiting.remove(index).expect("index from next_waiting");
            for id in hit.ids() {
                self.blocks.acquire(id);
            }
            seq.block_tables = hit.tables;
            let placed = self
                .blocks
                .allocate_to(&mut seq.block_tables, cached, cached + n);
            assert!(placed, "checked free count above");
            seq.block_hashes = hashes[..hit.blocks].to_vec();
            seq.num_computed = cached;
            if seq.timings.first_scheduled.is_none() {
                seq.timings.first_scheduled = Some(Instant::now());
                seq.cached_prompt_tokens = cached;
                self.count_first_admission(&seq, (cached, 0), hashes.first());
            }
            out.chunks.push(ScheduledChunk {
                seq_id: seq.id,
                start: cached,
                len: n,
                sample: cached + n == seq.tokens.len(),
                drafts: 0,
                prompt_logits: 0..0,
            });
            budget.tokens -= n;
            budget.prefill -= n;
            self.running.push(seq);
        }
        budget.tokens += reserve.tokens;
        budget.prefill += reserve.tokens;
    }

    /// Counts a prompt's first admission in the prefix cache's counters: `cached` of its
    /// tokens hit, `from_disk` of them read back from the disk tier; `first_block` is its
    /// first block's key (logged, to follow a router's placement).
    fn count_first_admission(
        &mut self,
        seq: &Sequence,
        (cached, from_disk): (usize, usize),
        first_block: Option<&BlockHash>,
    ) {
        self.stats.prefix_cache_queries += seq.prompt_len as u64;
        self.stats.prefix_cache_hits += cached as u64;
        if self.disk.is_some() {
            self.stats.disk_cache_queries += seq.prompt_len as u64;
            self.stats.disk_cache_hits += from_disk as u64;
        }
        // Which prompt hit how much, for following a router's placement from the logs.
        tracing::debug!(
            "admitted {:?}: {} prompt tokens, {cached} from the prefix cache ({from_disk} from disk), first block {:?}, {} running",
            seq.id,
            seq.prompt_len,
            first_block,
            self.running.len()
        );
    }

    fn build_batch(&self, out: &mut SchedulerOutput) {
        let bs = self.blocks.block_size();
        for chunk in &mut out.chunks {
            let seq = self
                .running
                .iter()
                .find(|s| s.id == chunk.seq_id)
                .expect("scheduled seq is running");
            let end = chunk.start + chunk.len;
            if chunk.drafts > 0 {
                // The last token, then the drafts that may follow it.
                let tokens: Vec<u32> = seq.tokens[chunk.start..]
                    .iter()
                    .chain(&seq.drafts[..chunk.drafts])
                    .copied()
                    .collect();
                out.batch
                    .push_chunk(&tokens, chunk.start, &seq.block_tables, bs, true);
                out.batch.verify_drafts(chunk.drafts);
                continue;
            }
            let tokens = &seq.tokens[chunk.start..end];
            if let Some(pool) = &seq.pool {
                // Prefill-only: its rows give hidden states, never a token.
                chunk.sample = false;
                out.batch
                    .push_chunk(tokens, chunk.start, &seq.block_tables, bs, false);
                out.batch
                    .want_hidden(pool.wanted(chunk.start, chunk.len, seq.prompt_len));
                continue;
            }
            out.batch
                .push_chunk(tokens, chunk.start, &seq.block_tables, bs, chunk.sample);
            let wanted = seq.pending_prompt_logits();
            let first = wanted.start.max(chunk.start);
            let last = wanted.end.min(end);
            if first < last {
                chunk.prompt_logits = first..last;
                out.batch
                    .want_prompt_logits(first - chunk.start..last - chunk.start);
            }
        }
    }

    fn running_index(&self, id: SeqId) -> Option<usize> {
        self.running.iter().position(|s| s.id == id)
    }

    /// Removes a request wherever it is, freeing its blocks at once.
    pub fn abort(&mut self, id: SeqId) -> Option<Sequence> {
        let mut seq = if let Some(i) = self.running_index(id) {
            self.running.remove(i)
        } else if let Some(i) = self.loading.iter().position(|l| l.seq.id == id) {
            // Its read may still be under way: the reader fills a buffer of its own, never
            // these pages, so they are free at once (the read's result is dropped).
            self.loading.swap_remove(i).seq
        } else {
            let i = self.waiting.iter().position(|s| s.id == id)?;
            self.waiting.remove(i)?
        };
        self.free_blocks(&mut seq);
        seq.finish = Some(FinishReason::Abort);
        seq.timings.finished = Some(Instant::now());
        Some(seq)
    }
}
