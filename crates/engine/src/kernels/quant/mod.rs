//! `QuantMatrix`: GGUF-quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the K-quants
//! Q4K, Q5K, Q6K) multiplied in their own bits by our batched, batch-invariant kernels, on
//! every CPU path bit for bit the same.
//!
//! Activations are quantized per row to int8 blocks of 32 (scale = amax/127, round half away
//! from zero, as ggml's Q8_0/Q8_1). Each block's dot product `i` is an exact integer
//! (`|i| ≤ 32·127·127 < 2²⁴`, exact in f32). Per output element the float sequence is
//! fixed: in ascending block order `acc = fma(i, d_x·d_w, acc)` and, for Q4_1 and Q5_1,
//! `mn = fma(m_w, d_x·Σx, mn)`; the result is `acc + mn`. Q5_0/Q5_1 are Q4_0/Q4_1 with a
//! fifth bit per quant (q ∈ 0..32, Q5_0's offset 16), in the same sequence. The
//! conversion, product and fma per block and element are what bounds the tiles (they share
//! the vector pipes with the integer dots), so a block is never split into float partial
//! sums: halves would double that work per block.
//! Tiles only change which elements are computed together, never that sequence, and `k` is
//! never split across threads, so a row's result is independent of the batch, and the SIMD
//! paths equal the portable one.
//!
//! K-quants (layout in `k_quants.rs`) run per 32-block too, with their own sequence. Q4K/Q5K:
//! the block's whole integer dot `i` (q ∈ 0..16 or 0..32), `dw = d·sc` and `mw = dmin·m`
//! (both exact in f32), `acc = fma(i, d_x·dw, acc)` and `mn = fma(mw, d_x·Σx, mn)`; the
//! result is `acc − mn`. Q6K: per 16-element half the integer dot less `32·Σx`, times the
//! half's int8 scale, both added as integers (`|i| ≤ 2·128·16·32·127 < 2²⁴`, exact in f32),
//! then `acc = fma(i, d_x·d, acc)`; the result is `acc`.
//!
//! One concept or one instruction set a file, and no two files name each other, directly or
//! around a circle:
//! - `weight_format.rs` [`WeightFormat`]: the GGUF block formats run natively.
//! - `quantize_block.rs`: the one 32-block quantizer (amax/127) every path must equal.
//! - `group.rs` `Group`: one weight group as a tile reads it, and where each quant sits.
//! - `quant_matrix.rs` [`QuantMatrix`]: the repacked weights; `k_quants.rs` repacks
//!   Q4K/Q5K/Q6K and holds their portable row.
//! - `activations.rs` [`QuantizedActivations`], [`Input`], [`RowNorm`]: activation rows
//!   quantized once per matmul (RMSNorm fused in).
//! - `tile.rs` `Tile`, `Rows` and `TileKernel`, the one trait every instruction set's
//!   tiles sit behind; `tile_sink.rs` where finished tiles are stored.
//! - `portable.rs`, `neon.rs` (aarch64), `x86/` (`avx2.rs`, `avx_vnni.rs`,
//!   `avx512_vnni.rs` over the 256-bit body in `ymm.rs`, `zmm.rs` the 512-bit pair tiles,
//!   `quantize.rs` the row quantizers): one `TileKernel` each.
//! - `matmul.rs`: the matmul entry points, the parallel tasks, and the one `match` that
//!   picks a `TileKernel` from the [`CpuKernel`](crate::kernels::cpu_kernel::CpuKernel).
//!
//! Adding an instruction set: a new file with a unit struct implementing `TileKernel` (its
//! tiles behind `#[target_feature]`, in the sequence above), and one arm in `matmul::tiles`
//! (and `matmul::tile_rows`) selecting it from its `CpuKernel`. The dispatch is static: each
//! arm calls its implementation directly, monomorphised, so the trait costs nothing.

mod activations;
mod group;
mod k_quants;
mod matmul;
#[cfg(target_arch = "aarch64")]
mod neon;
mod portable;
mod quant_matrix;
mod quantize_block;
mod tile;
mod tile_sink;
mod weight_format;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use activations::{Input, QuantizedActivations, RowNorm};
pub use quant_matrix::QuantMatrix;
pub use weight_format::WeightFormat;

/// Elements per quantization block (one scale each).
pub const BLOCK: usize = 32;
/// Elements per K-quant super-block (one f16 `d`, and `dmin`, each).
pub const SUPER: usize = 256;
/// 32-blocks per K-quant super-block.
const SUB: usize = SUPER / BLOCK;
/// Weight rows (output columns) per Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 group and tile; the weights are
/// stored interleaved by this, one 32-bit lane per row in a 256-bit vector.
pub const NR: usize = 8;
/// Weight rows per K-quant group and tile (their lanes hold half blocks: two per row).
pub const K_NR: usize = 4;
/// Activation rows per tile at most (the AMX tiles'; AVX-512 takes [`MR_512`], the 256-bit
/// tiles [`MR_256`]).
pub const MR: usize = 16;
/// Activation rows per tile of the AVX-512 pair tiles: sixteen accumulators of two groups.
const MR_512: usize = 8;
/// Activation rows per tile of the portable and 256-bit kernels: their registers hold no more.
const MR_256: usize = 4;
