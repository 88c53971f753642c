//! `WeightMode` (`--weight-mode`): how matmul weights are kept in memory.

/// How matmul weights are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightMode {
    /// Quantized weights stay in their GGUF format (formats without a native kernel:
    /// requantized to Q8_0 at load); activations are quantized to int8 blocks inside the
    /// matmul, as llama.cpp does.
    #[default]
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
