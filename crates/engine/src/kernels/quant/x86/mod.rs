//! The x86-64 SIMD paths, one file per instruction set: `avx2.rs`, `avx_vnni.rs` and
//! `avx512_vnni.rs` each stamp the shared 256-bit tile body of `ymm.rs` with their integer
//! dot (only the dot of four adjacent u8×i8 products differs) and implement `TileKernel`;
//! `zmm.rs` holds the AVX-512 512-bit pair tiles `avx512_vnni.rs` prefers; `amx.rs` runs
//! sixteen rows at a time on AMX tiles (and on their emulation, for tests). `quantize.rs`
//! quantizes activation rows on AVX2 / AVX-512, `prefetch.rs` is every tile's prefetch.

mod amx;
mod avx2;
mod avx512_vnni;
mod avx_vnni;
mod prefetch;
pub(super) mod quantize;
mod ymm;
mod zmm;

pub(super) use amx::{Amx, AmxEmulated};
pub(super) use avx2::Avx2;
pub(super) use avx512_vnni::Avx512Vnni;
pub(super) use avx_vnni::AvxVnni;
