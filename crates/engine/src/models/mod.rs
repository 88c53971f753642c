//! Model implementations. Each file mirrors one checkpoint family.

pub mod layers;
pub mod llama;
pub mod q8_matrix;

pub use layers::WeightMode;
pub use llama::Llama;
