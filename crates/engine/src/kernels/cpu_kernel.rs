//! `CpuKernel`: which SIMD implementation the quantized kernels run, picked once per process.
//!
//! The engine lands on CPUs with different vector units (AVX2 only; AVX-512 with VNNI; Zen 4
//! with AVX-VNNI; aarch64 with the dot-product extension), so the path is detected at run
//! time, logged, and can be forced with
//! `TOKENMILL_CPU_KERNEL=portable|avx2|avx_vnni|avx512_vnni|neon_dotprod` for tests and
//! benchmarks.
//! Every path produces the same bits as `Portable`; only its speed differs. AMX is never
//! used: some VMs advertise it in cpuid and trap on its instructions.

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
    /// aarch64 NEON with the dot-product extension (`sdot`, Armv8.2 and later); built only
    /// for aarch64 targets.
    #[cfg(target_arch = "aarch64")]
    NeonDotprod,
}

/// The environment variable that forces a kernel.
pub const KERNEL_ENV: &str = "TOKENMILL_CPU_KERNEL";

static ACTIVE: OnceLock<CpuKernel> = OnceLock::new();

impl CpuKernel {
    #[cfg(not(target_arch = "aarch64"))]
    pub const ALL: [CpuKernel; 4] = [
        CpuKernel::Portable,
        CpuKernel::Avx2,
        CpuKernel::AvxVnni,
        CpuKernel::Avx512Vnni,
    ];
    #[cfg(target_arch = "aarch64")]
    pub const ALL: [CpuKernel; 5] = [
        CpuKernel::Portable,
        CpuKernel::Avx2,
        CpuKernel::AvxVnni,
        CpuKernel::Avx512Vnni,
        CpuKernel::NeonDotprod,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CpuKernel::Portable => "portable",
            CpuKernel::Avx2 => "avx2",
            CpuKernel::AvxVnni => "avx_vnni",
            CpuKernel::Avx512Vnni => "avx512_vnni",
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

    /// The fastest supported path.
    pub fn best() -> CpuKernel {
        *Self::supported().last().unwrap_or(&CpuKernel::Portable)
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
                    Err(format!(
                        "{KERNEL_ENV}={name}: this CPU cannot run it (supported: {})",
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
            tracing::info!("kernel: {}", kernel.name());
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
