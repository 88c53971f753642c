//! Model implementations over the kernels: one file per architecture family, the layers
//! they share, and the checkpoints (GGUF, safetensors, random weights) they load from.

pub mod checkpoint;
pub mod forward_scratch;
pub mod layers;
pub mod llama;
pub mod moe_router;
pub mod sparse_moe_block;

pub use llama::Llama;
pub use moe_router::ExpertChoice;
