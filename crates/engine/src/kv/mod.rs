//! The paged KV cache: block accounting and the prefix cache (`BlockManager`, mechanism
//! only; the scheduler holds the policy), a sequence's blocks in one KV cache group
//! (`BlockTable`), the storage the attention kernels read (`KvCache`, with `ScaledSlab` the
//! layout of its `q8_0` and `fp8` slabs, `Q8Slab` and `Fp8Slab`), the events that report the
//! prefix cache's changes (`KvEvent`), and the prefix cache's second tier on disk
//! (`KvDiskTier`, its files `DiskBlock`).

pub mod block_id;
pub mod block_manager;
pub mod block_table;
pub mod disk_block;
pub mod fp8_slab;
pub mod kv_cache;
pub mod kv_disk_tier;
pub mod kv_event;
pub mod q8_slab;
pub mod scaled_slab;
