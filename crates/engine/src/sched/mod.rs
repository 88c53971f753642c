//! Scheduling: the policy that splits each step's one token budget between running
//! sequences and waiting prompts, the requests and sequences it moves, and the
//! `ForwardBatch` (crate::forward_batch) it lays out for the worker.

pub mod draft_acceptance;
pub mod hidden_pool;
pub mod moe_expert_stats;
pub mod prefill_slots;
pub mod request;
pub mod scheduler;
pub mod scheduler_output;
pub mod scheduler_stats;
pub mod sequence;
pub mod spec_decode_stats;
pub mod step_cost_model;
