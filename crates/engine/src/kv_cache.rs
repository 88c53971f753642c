//! `KvCache`: the paged key/value storage, one pair of slabs per layer, in f32, f16 or bf16.
//!
//! Slot `s` (`block * block_size + offset`) holds one token's values for every KV head,
//! `[num_kv_heads * head_dim]` contiguous. Keys are stored transposed within each block,
//! `[block][num_kv_heads * head_dim][block_size]`: attention scores a run of positions at
//! once with positions in the SIMD lanes, so it wants one key element of consecutive
//! positions side by side. Writing a token's key scatters it once; every later step reads
//! it many times, already in that order.
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
/// the OS hands out lazily, not gigabytes written at startup. Small pages, unlike the
/// weights': every new block's first write faults its pages in, and a 2 MiB page costs
/// that fault plus compaction (16-row Qwen3-0.6B steps spent 7.7–8.8 ms writing the KV on
/// huge pages against 2.3–2.8 on small ones; docs/performance.md, eleventh session).
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

    /// Rounds `src` into elements `start`, `start + stride`, … (one per element of `src`).
    fn store_strided(&mut self, start: usize, stride: usize, src: &[f32]) {
        const MAX: usize = 1024;
        let mut bits = [0u16; MAX];
        for (i, src) in src.chunks(MAX).enumerate() {
            let first = start + i * MAX * stride;
            match self {
                Self::F32(s) => {
                    for (j, &x) in src.iter().enumerate() {
                        s[first + j * stride] = x;
                    }
                    continue;
                }
                Self::F16(_) => bits[..src.len()]
                    .reinterpret_cast_mut::<f16>()
                    .convert_from_f32_slice(src),
                Self::Bf16(_) => bits[..src.len()]
                    .reinterpret_cast_mut::<bf16>()
                    .convert_from_f32_slice(src),
            }
            if let Self::F16(s) | Self::Bf16(s) = self {
                for (j, &b) in bits[..src.len()].iter().enumerate() {
                    s[first + j * stride] = b;
                }
            }
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
    /// `[num_blocks, width, block_size]`: transposed within each block.
    pub keys: KvSlab,
    /// `[num_blocks * block_size, width]`
    pub values: KvSlab,
    block_size: usize,
    width: usize,
}

impl KvLayer {
    /// Element index of slot `slot`'s key element 0; element `e` is `block_size · e` further.
    pub fn key_start(&self, slot: usize) -> usize {
        let (block, offset) = (slot / self.block_size, slot % self.block_size);
        block * self.block_size * self.width + offset
    }

    /// Slot `slot`'s key for every KV head (`[width]`), widened to f32.
    pub fn key_row(&self, slot: usize, dst: &mut [f32]) {
        let start = self.key_start(slot);
        for (e, d) in dst.iter_mut().enumerate() {
            let mut one = [0.0];
            self.keys.load(start + e * self.block_size, &mut one);
            *d = one[0];
        }
    }

    /// Slot `slot`'s value for every KV head (`[width]`), widened to f32.
    pub fn value_row(&self, slot: usize, dst: &mut [f32]) {
        self.values.load(slot * self.width, dst);
    }
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
                block_size,
                width,
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
            let start = layer.key_start(slot);
            let key = &keys[row * w..(row + 1) * w];
            layer.keys.store_strided(start, self.block_size, key);
            layer
                .values
                .store(slot * w, &values[row * w..(row + 1) * w]);
        }
    }
}
