//! Model implementations over the kernels: `DecoderModel`, which runs every supported
//! family, the layers it is built of, and the checkpoints (GGUF, safetensors, random
//! weights) it loads from.

pub mod checkpoint;
pub mod decoder_model;
pub mod forward_scratch;
pub mod layers;
pub mod moe_router;
pub mod sparse_moe_block;

pub use decoder_model::DecoderModel;
pub use moe_router::ExpertChoice;
