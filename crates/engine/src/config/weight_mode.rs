//! `WeightMode` (`--weight-mode`): how matmul weights are kept in memory.

/// How matmul weights are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightMode {
    /// Quantized weights stay in their GGUF format (formats without a native kernel:
    /// requantized to Q8_0 at load); activations are quantized to int8 blocks inside the
    /// matmul, as llama.cpp does.
    Quantized,
    /// Every weight dequantized to f32: exact but slower; the yardstick for accuracy.
    F32,
}

impl std::str::FromStr for WeightMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "quantized" | "auto" => Ok(Self::Quantized),
            "f32" => Ok(Self::F32),
            other => Err(format!("unknown weight mode {other:?} (quantized, f32)")),
        }
    }
}

/// The flag's spelling, which `from_str` reads back (clap shows the default with it).
impl std::fmt::Display for WeightMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Quantized => "quantized",
            Self::F32 => "f32",
        })
    }
}
