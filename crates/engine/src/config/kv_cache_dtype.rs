//! `KvCacheDtype`: the element type the KV cache stores (`--kv-cache-dtype`).

/// `--kv-cache-dtype` (vLLM's name): the element type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// f16: half the memory of f32 (twice the tokens) with a 10-bit mantissa.
    Auto,
    F32,
    F16,
    Bf16,
    /// llama.cpp's `q8_0`: blocks of [`Q8_BLOCK`] values along the head dim, each an int8
    /// times one f16 scale (34 bytes per 32 values, 1.88× f16's tokens). Quantized as the
    /// keys and values are written; attention reads the int8s and scales directly.
    Q8_0,
    /// vLLM's `fp8`: OCP e4m3 (`e4m3fn`, no infinities) bytes, each head's row of one
    /// token (its key or its value) times one f16 scale, the row's largest magnitude over
    /// 448 (`head_dim + 2` bytes per `head_dim` values: 1.94× f16's tokens at head dim 64).
    /// Quantized as the keys and values are written; attention reads the bytes and scales
    /// directly. Any head dim.
    Fp8,
}

/// Values of one `q8_0` block, which share one f16 scale. A head dim must be a multiple.
pub const Q8_BLOCK: usize = 32;

impl KvCacheDtype {
    /// The concrete type `Auto` stands for.
    pub fn resolve(self) -> Self {
        match self {
            Self::Auto => Self::F16,
            other => other,
        }
    }

    /// Bytes that `values` stored numbers take, in whole heads of `head_dim` (a whole number
    /// of `q8_0` blocks for `q8_0`: a head dim is checked to be a multiple of [`Q8_BLOCK`];
    /// one scale per head's row for `fp8`). Saturates.
    pub fn bytes_for(self, values: usize, head_dim: usize) -> usize {
        match self.resolve() {
            Self::F32 => values.saturating_mul(4),
            Self::Q8_0 => (values / Q8_BLOCK).saturating_mul(Q8_BLOCK + 2),
            Self::Fp8 => values.saturating_add((values / head_dim.max(1)).saturating_mul(2)),
            _ => values.saturating_mul(2),
        }
    }

    /// The quantization block the head dim must be a multiple of, for block formats.
    pub fn block_values(self) -> Option<usize> {
        match self.resolve() {
            Self::Q8_0 => Some(Q8_BLOCK),
            _ => None,
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
            "q8_0" => Ok(Self::Q8_0),
            "fp8" | "fp8_e4m3" => Ok(Self::Fp8),
            other => Err(format!(
                "unknown KV cache dtype {other:?} (auto, f32, f16, bf16, q8_0, fp8)"
            )),
        }
    }
}

/// The flag's spelling, which `from_str` reads back (clap shows the default with it).
impl std::fmt::Display for KvCacheDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Fp8 => "fp8",
        })
    }
}
