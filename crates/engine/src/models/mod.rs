//! Model implementations. Each file mirrors one checkpoint family.

pub mod forward_scratch;
pub mod layers;
pub mod llama;
pub mod quant_matrix;

pub use layers::WeightMode;
pub use llama::Llama;
