//! The paged KV cache: block accounting and the prefix cache (`BlockManager`, mechanism
//! only; the scheduler holds the policy) and the storage the attention kernels read
//! (`KvCache`), and the events that report the prefix cache's changes (`KvEvent`).

pub mod block_manager;
pub mod kv_cache;
pub mod kv_event;
