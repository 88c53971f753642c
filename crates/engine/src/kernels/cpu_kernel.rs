//! `CpuKernel`: which SIMD implementation the quantized kernels run, picked once per process.
//!
//! The engine lands on CPUs with different vector units (AVX2 only; AVX-512 with VNNI; Zen 4
//! with AVX-VNNI; aarch64 with the dot-product extension), so the path is detected at run
//! time, logged, and can be forced with
//! `TOKENMILL_CPU_KERNEL=portable|avx2|avx_vnni|avx512_vnni|amx_int8|neon_dotprod` for tests
//! and benchmarks (or `amx_int8_emulated`, the AMX kernel's logic on emulated tiles, which
//! is never picked on its own).
//! Every path produces the same bits as `Portable`; only its speed differs. AMX counts as
//! supported only once a probe tile multiply ran right (`amx::amx_status`): a hypervisor may
//! advertise the unit and trap on it.

use crate::kernels::amx::amx_status;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuKernel {
    /// Plain Rust, any CPU: the reference every other path must equal bit for bit.
    Portable,
    /// AVX2 + FMA + F16C: `maddubs`/`madd` integer dot products.
    Avx2,
    /// AVX2 plus 256-bit VNNI (`vpdpbusd`, Alder Lake and later).
    AvxVnni,
    /// AVX-512 F/BW/VL + VNNI (`vpdpbusd` on 256-bit registers via VL).
    Avx512Vnni,
    /// AVX-512 VNNI plus AMX int8 tiles (`tdpbssd`, Sapphire Rapids and later) for matmuls
    /// of more rows than the AVX-512 tiles take.
    Amx,
    /// [`Amx`](Self::Amx) with its tile instructions emulated in Rust: the same bits, far
    /// slower; for testing the AMX kernel on CPUs without the unit.
    AmxEmulated,
    /// aarch64 NEON with the dot-product extension (`sdot`, Armv8.2 and later); built only
    /// for aarch64 targets.
    #[cfg(target_arch = "aarch64")]
    NeonDotprod,
}

/// The environment variable that forces a kernel.
pub const KERNEL_ENV: &str = "TOKENMILL_CPU_KERNEL";

static ACTIVE: OnceLock<CpuKernel> = OnceLock::new();

impl CpuKernel {
    /// Every path, slowest first (the emulated one before the real AMX, which it stands in
    /// for).
    #[cfg(not(target_arch = "aarch64"))]
    pub const ALL: [CpuKernel; 6] = [
        CpuKernel::Portable,
        CpuKernel::Avx2,
        CpuKernel::AvxVnni,
        CpuKernel::Avx512Vnni,
        CpuKernel::AmxEmulated,
        CpuKernel::Amx,
    ];
    #[cfg(target_arch = "aarch64")]
    pub const ALL: [CpuKernel; 7] = [
        CpuKernel::Portable,
        CpuKernel::Avx2,
        CpuKernel::AvxVnni,
        CpuKernel::Avx512Vnni,
        CpuKernel::AmxEmulated,
        CpuKernel::Amx,
        CpuKernel::NeonDotprod,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CpuKernel::Portable => "portable",
            CpuKernel::Avx2 => "avx2",
            CpuKernel::AvxVnni => "avx_vnni",
            CpuKernel::Avx512Vnni => "avx512_vnni",
            CpuKernel::Amx => "amx_int8",
            CpuKernel::AmxEmulated => "amx_int8_emulated",
            #[cfg(target_arch = "aarch64")]
            CpuKernel::NeonDotprod => "neon_dotprod",
        }
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            CpuKernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            CpuKernel::AvxVnni => {
                CpuKernel::Avx2.is_supported() && is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Avx512Vnni => {
                CpuKernel::Avx2.is_supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            CpuKernel::AmxEmulated => CpuKernel::Avx512Vnni.is_supported(),
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Amx => CpuKernel::Avx512Vnni.is_supported() && amx_status().is_ok(),
            #[cfg(target_arch = "aarch64")]
            CpuKernel::NeonDotprod => std::arch::is_aarch64_feature_detected!("dotprod"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every path this CPU runs, portable first.
    pub fn supported() -> Vec<CpuKernel> {
        Self::ALL.into_iter().filter(|k| k.is_supported()).collect()
    }

    /// Whether the path runs AVX-512 (its own tiles, or beside AMX).
    pub fn has_avx512(self) -> bool {
        matches!(
            self,
            CpuKernel::Avx512Vnni | CpuKernel::Amx | CpuKernel::AmxEmulated
        )
    }

    /// The fastest supported path (never the emulated one).
    pub fn best() -> CpuKernel {
        Self::supported()
            .into_iter()
            .rfind(|&k| k != CpuKernel::AmxEmulated)
            .unwrap_or(CpuKernel::Portable)
    }

    /// Why the AMX path is not this CPU's, for the startup log; `None` where it is.
    pub fn amx_unavailable() -> Option<String> {
        if !CpuKernel::Avx512Vnni.is_supported() {
            return Some("no AVX-512 VNNI beside it".into());
        }
        amx_status().err()
    }

    /// The path named by `TOKENMILL_CPU_KERNEL`, or the best one when it is unset.
    /// An unknown name, or one this CPU cannot run, is an error naming the choices.
    pub fn from_env() -> Result<CpuKernel, String> {
        match std::env::var(KERNEL_ENV) {
            Ok(name) if !name.is_empty() => {
                let kernel: CpuKernel = name.parse().map_err(|e| format!("{KERNEL_ENV}: {e}"))?;
                if kernel.is_supported() {
                    Ok(kernel)
                } else {
                    let why = match (kernel, Self::amx_unavailable()) {
                        (CpuKernel::Amx, Some(why)) => format!(": {why}"),
                        _ => String::new(),
                    };
                    Err(format!(
                        "{KERNEL_ENV}={name}: this CPU cannot run it{why} (supported: {})",
                        names(&Self::supported())
                    ))
                }
            }
            _ => Ok(Self::best()),
        }
    }

    /// The path every quantized matmul uses, fixed on first use. A bad environment value
    /// falls back to the best path here; model loading calls [`from_env`](Self::from_env)
    /// first so such a value is refused before anything runs.
    pub fn active() -> CpuKernel {
        *ACTIVE.get_or_init(|| {
            let kernel = Self::from_env().unwrap_or_else(|e| {
                tracing::warn!("{e}; using {}", Self::best().name());
                Self::best()
            });
            match Self::amx_unavailable() {
                Some(why) if kernel != CpuKernel::Amx => {
                    tracing::info!("kernel: {} (amx_int8 unavailable: {why})", kernel.name())
                }
                _ => tracing::info!("kernel: {}", kernel.name()),
            }
            kernel
        })
    }
}

fn names(kernels: &[CpuKernel]) -> String {
    kernels
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl std::str::FromStr for CpuKernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown CPU kernel {s:?} ({})", names(&Self::ALL)))
    }
}

impl std::fmt::Display for CpuKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
