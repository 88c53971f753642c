//! `KvCacheDtype`: the element type the KV cache stores (`--kv-cache-dtype`).

/// `--kv-cache-dtype` (vLLM's name): the element type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// f16: half the memory of f32 (twice the tokens) with a 10-bit mantissa.
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

/// The flag's spelling, which `from_str` reads back (clap shows the default with it).
impl std::fmt::Display for KvCacheDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        })
    }
}
