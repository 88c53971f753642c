//! CPU kernels, below the models: which instruction-set path runs (`CpuKernel`), the
//! thread pool every kernel shards over, weight storage, and the matmuls (dense f32 and
//! quantized, one file per instruction set under `quant/`).

pub mod amx;
pub mod compute_pool;
pub mod cpu_kernel;
pub mod dense_matrix;
pub mod exp;
pub mod huge_buf;
pub mod int8_probe;
pub mod quant;
pub mod read_bandwidth;
pub mod step_gate;
