//! Model implementations. Each file mirrors one checkpoint family.

pub mod dense_matrix;
pub mod forward_scratch;
pub mod huge_buf;
pub mod layers;
pub mod llama;
pub mod moe_router;
pub mod quant_matrix;
pub mod sparse_moe_block;

pub use layers::WeightMode;
pub use llama::Llama;
pub use moe_router::ExpertChoice;
