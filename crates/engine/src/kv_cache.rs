//! `KvCache`: the paged key/value storage, one pair of slabs per layer, in f32, f16 or bf16.
//!
//! Slot `s` (`block * block_size + offset`) holds one token's keys for every KV head,
//! `[num_kv_heads * head_dim]` contiguous, so a head's key is one short contiguous read.
//! Keys and values are computed in f32 and rounded (to nearest, ties to even) when stored;
//! the attention kernel widens them back to f32 as it reads, which is exact.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};

/// `--kv-cache-dtype` (vLLM's name): the element type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvCacheDtype {
    /// f16: half the memory of f32 (twice the tokens) with a 10-bit mantissa.
    #[default]
    Auto,
    F32,
    F16,
    Bf16,
}

impl KvCacheDtype {
    /// The concrete type `Auto` stands for.
    pub fn resolve(self) -> Self {
        match self {
            Self::Auto => Self::F16,
            other => other,
        }
    }

    /// Bytes per stored element.
    pub fn element_size(self) -> usize {
        match self.resolve() {
            Self::F32 => 4,
            _ => 2,
        }
    }
}

impl std::str::FromStr for KvCacheDtype {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "f32" | "float32" | "float" => Ok(Self::F32),
            "f16" | "float16" | "half" => Ok(Self::F16),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            other => Err(format!(
                "unknown KV cache dtype {other:?} (auto, f32, f16, bf16)"
            )),
        }
    }
}

/// One slab of rows. Half types are kept as their bits so a fresh pool is zeroed pages
/// the OS hands out lazily, not gigabytes written at startup.
pub enum KvSlab {
    F32(Vec<f32>),
    F16(Vec<u16>),
    Bf16(Vec<u16>),
}

impl KvSlab {
    fn zeroed(dtype: KvCacheDtype, len: usize) -> Self {
        match dtype.resolve() {
            KvCacheDtype::F32 => Self::F32(vec![0.0; len]),
            KvCacheDtype::Bf16 => Self::Bf16(vec![0; len]),
            _ => Self::F16(vec![0; len]),
        }
    }

    /// Rounds `src` into elements `start..start + src.len()`.
    fn store(&mut self, start: usize, src: &[f32]) {
        let end = start + src.len();
        match self {
            Self::F32(s) => s[start..end].copy_from_slice(src),
            Self::F16(s) => s[start..end]
                .reinterpret_cast_mut::<f16>()
                .convert_from_f32_slice(src),
            Self::Bf16(s) => s[start..end]
                .reinterpret_cast_mut::<bf16>()
                .convert_from_f32_slice(src),
        }
    }

    /// Elements `start..start + dst.len()` widened to f32 (exact).
    pub fn load(&self, start: usize, dst: &mut [f32]) {
        let end = start + dst.len();
        match self {
            Self::F32(s) => dst.copy_from_slice(&s[start..end]),
            Self::F16(s) => s[start..end]
                .reinterpret_cast::<f16>()
                .convert_to_f32_slice(dst),
            Self::Bf16(s) => s[start..end]
                .reinterpret_cast::<bf16>()
                .convert_to_f32_slice(dst),
        }
    }
}

pub struct KvCache {
    block_size: usize,
    /// `num_kv_heads * head_dim`
    width: usize,
    dtype: KvCacheDtype,
    layers: Vec<KvLayer>,
}

pub struct KvLayer {
    /// `[num_blocks * block_size, width]`
    pub keys: KvSlab,
    pub values: KvSlab,
}

impl KvCache {
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        width: usize,
        dtype: KvCacheDtype,
    ) -> Self {
        let slab = num_blocks * block_size * width;
        let layers = (0..num_layers)
            .map(|_| KvLayer {
                keys: KvSlab::zeroed(dtype, slab),
                values: KvSlab::zeroed(dtype, slab),
            })
            .collect();
        Self {
            block_size,
            width,
            dtype: dtype.resolve(),
            layers,
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// The concrete element type (never `Auto`).
    pub fn dtype(&self) -> KvCacheDtype {
        self.dtype
    }

    pub fn layer(&self, layer: usize) -> &KvLayer {
        &self.layers[layer]
    }

    /// Stores rows of `keys`/`values` (`[T, width]`, f32) at `slots[T]`, rounding to the
    /// cache's type.
    pub fn write(&mut self, layer: usize, slots: &[usize], keys: &[f32], values: &[f32]) {
        let w = self.width;
        let layer = &mut self.layers[layer];
        for (row, &slot) in slots.iter().enumerate() {
            layer.keys.store(slot * w, &keys[row * w..(row + 1) * w]);
            layer
                .values
                .store(slot * w, &values[row * w..(row + 1) * w]);
        }
    }
}
