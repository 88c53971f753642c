//! AMX tiles as Linux hands them out: whether this process may use them ([`amx_status`]),
//! the few tile instructions the int8 matmul needs behind one trait ([`TileUnit`]), run by
//! the hardware ([`HwTiles`]) or by plain Rust with the same semantics ([`EmulatedTiles`]).
//!
//! Linux enables the 8 KiB tile state per process on request: CPUID must advertise AMX-TILE
//! and AMX-INT8, XCR0 must hold XTILECFG and XTILEDATA, and `arch_prctl(ARCH_REQ_XCOMP_PERM,
//! XFEATURE_XTILEDATA)` must grant it before any tile instruction runs (else SIGILL). A
//! hypervisor may advertise what it then traps, so the check ends with one real tile
//! multiply run in a forked child first (a trap kills the child, not the server), then in
//! this process, each result compared with the integer product computed in Rust.
//!
//! The emulator exists so every machine can run the AMX kernel's own logic (weight layout,
//! padding, the float sequence after the integer dot) against the portable path bit for
//! bit: only the instructions below differ between the two units.

use std::sync::OnceLock;

/// Tile registers the kernels use.
pub const TILES: usize = 8;
/// Bytes of one tile row at most, and rows of one tile at most.
pub const TILE_BYTES: usize = 64;
pub const TILE_ROWS: usize = 16;

/// The 64-byte operand of `ldtilecfg`: palette 1, then each tile's bytes per row and rows.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// Every tile unused (`rows` and `colsb` zero) until [`shape`](Self::shape) sets it.
    pub const fn new() -> Self {
        Self {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        }
    }

    /// Tile `t` holds `rows` rows of `bytes` bytes.
    pub const fn shape(mut self, t: usize, rows: u8, bytes: u16) -> Self {
        assert!(t < TILES && rows as usize <= TILE_ROWS && bytes as usize <= TILE_BYTES);
        self.rows[t] = rows;
        self.colsb[t] = bytes;
        self
    }

    fn of(&self, t: usize) -> (usize, usize) {
        (self.rows[t] as usize, self.colsb[t] as usize)
    }
}

impl Default for TileConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// The tile instructions the int8 kernels use, with their hardware meaning. Tile indices
/// are constants (`T`), as the instructions encode their registers.
///
/// # Safety
/// Every method is `unsafe`: the pointers must cover `rows` rows of `bytes` bytes at
/// `stride` as the configuration shapes the tile, and [`HwTiles`] needs
/// [`amx_status`] to have succeeded and [`configure`](Self::configure) to have run on
/// this thread.
pub trait TileUnit {
    /// `ldtilecfg`: shapes every tile and zeroes them.
    ///
    /// # Safety
    /// See [`TileUnit`].
    unsafe fn configure(&mut self, config: &TileConfig);
    /// `tileloadd`: tile `T`'s rows from `src`, `stride` bytes apart.
    ///
    /// # Safety
    /// See [`TileUnit`].
    unsafe fn load<const T: usize>(&mut self, src: *const u8, stride: usize);
    /// `tilezero`.
    ///
    /// # Safety
    /// See [`TileUnit`].
    unsafe fn zero<const T: usize>(&mut self);
    /// `tdpbssd`: `C[m][n] += Σ_k Σ_{i<4} A[m][4k+i] · B[k][4n+i]`, signed bytes, int32
    /// sums (`C` = tile `C`, `A` and `B` likewise).
    ///
    /// # Safety
    /// See [`TileUnit`].
    unsafe fn dot<const C: usize, const A: usize, const B: usize>(&mut self);
    /// `tilestored`: tile `T`'s rows to `dst`, `stride` bytes apart.
    ///
    /// # Safety
    /// See [`TileUnit`].
    unsafe fn store<const T: usize>(&mut self, dst: *mut u8, stride: usize);
    /// `tilerelease`: the tile state back to its initial (unused) state.
    ///
    /// # Safety
    /// See [`TileUnit`].
    unsafe fn release(&mut self);
}

/// The AMX unit of this core.
#[derive(Clone, Copy, Debug, Default)]
pub struct HwTiles;

#[cfg(target_arch = "x86_64")]
impl TileUnit for HwTiles {
    #[inline(always)]
    unsafe fn configure(&mut self, config: &TileConfig) {
        // SAFETY: the caller's contract; `config` is 64 readable bytes.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) config as *const TileConfig, options(nostack, readonly))
        }
    }

    #[inline(always)]
    unsafe fn load<const T: usize>(&mut self, src: *const u8, stride: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match T {
                0 => {
                    std::arch::asm!("tileloadd tmm0, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                1 => {
                    std::arch::asm!("tileloadd tmm1, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                2 => {
                    std::arch::asm!("tileloadd tmm2, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                3 => {
                    std::arch::asm!("tileloadd tmm3, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                4 => {
                    std::arch::asm!("tileloadd tmm4, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                5 => {
                    std::arch::asm!("tileloadd tmm5, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                6 => {
                    std::arch::asm!("tileloadd tmm6, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                7 => {
                    std::arch::asm!("tileloadd tmm7, [{}+{}*1]", in(reg) src, in(reg) stride, options(nostack, readonly))
                }
                _ => unreachable!("no tile {T}"),
            }
        }
    }

    #[inline(always)]
    unsafe fn zero<const T: usize>(&mut self) {
        // SAFETY: the caller's contract.
        unsafe {
            match T {
                0 => std::arch::asm!("tilezero tmm0", options(nostack, nomem)),
                1 => std::arch::asm!("tilezero tmm1", options(nostack, nomem)),
                2 => std::arch::asm!("tilezero tmm2", options(nostack, nomem)),
                3 => std::arch::asm!("tilezero tmm3", options(nostack, nomem)),
                4 => std::arch::asm!("tilezero tmm4", options(nostack, nomem)),
                5 => std::arch::asm!("tilezero tmm5", options(nostack, nomem)),
                6 => std::arch::asm!("tilezero tmm6", options(nostack, nomem)),
                7 => std::arch::asm!("tilezero tmm7", options(nostack, nomem)),
                _ => unreachable!("no tile {T}"),
            }
        }
    }

    #[inline(always)]
    unsafe fn dot<const C: usize, const A: usize, const B: usize>(&mut self) {
        // The kernels use these combinations only: results in tmm4..tmm7, activations in
        // tmm0/tmm1, weights in tmm2/tmm3.
        // SAFETY: the caller's contract.
        unsafe {
            match (C, A, B) {
                (4, 0, 2) => std::arch::asm!("tdpbssd tmm4, tmm0, tmm2", options(nostack, nomem)),
                (5, 0, 3) => std::arch::asm!("tdpbssd tmm5, tmm0, tmm3", options(nostack, nomem)),
                (6, 1, 2) => std::arch::asm!("tdpbssd tmm6, tmm1, tmm2", options(nostack, nomem)),
                (7, 1, 3) => std::arch::asm!("tdpbssd tmm7, tmm1, tmm3", options(nostack, nomem)),
                _ => unreachable!("tdpbssd tmm{C}, tmm{A}, tmm{B} is not stamped"),
            }
        }
    }

    #[inline(always)]
    unsafe fn store<const T: usize>(&mut self, dst: *mut u8, stride: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match T {
                4 => {
                    std::arch::asm!("tilestored [{}+{}*1], tmm4", in(reg) dst, in(reg) stride, options(nostack))
                }
                5 => {
                    std::arch::asm!("tilestored [{}+{}*1], tmm5", in(reg) dst, in(reg) stride, options(nostack))
                }
                6 => {
                    std::arch::asm!("tilestored [{}+{}*1], tmm6", in(reg) dst, in(reg) stride, options(nostack))
                }
                7 => {
                    std::arch::asm!("tilestored [{}+{}*1], tmm7", in(reg) dst, in(reg) stride, options(nostack))
                }
                _ => unreachable!("tilestored of tmm{T} is not stamped"),
            }
        }
    }

    #[inline(always)]
    unsafe fn release(&mut self) {
        // SAFETY: the caller's contract.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) }
    }
}

/// Eight tiles in memory, with the instructions' semantics: loads fill only the configured
/// rows and bytes (the rest reads as zero), `dot` uses the configured shapes.
#[derive(Clone)]
pub struct EmulatedTiles {
    config: TileConfig,
    data: [[[u8; TILE_BYTES]; TILE_ROWS]; TILES],
}

impl Default for EmulatedTiles {
    fn default() -> Self {
        Self {
            config: TileConfig::new(),
            data: [[[0; TILE_BYTES]; TILE_ROWS]; TILES],
        }
    }
}

impl TileUnit for EmulatedTiles {
    unsafe fn configure(&mut self, config: &TileConfig) {
        self.config = *config;
        self.data = [[[0; TILE_BYTES]; TILE_ROWS]; TILES];
    }

    unsafe fn load<const T: usize>(&mut self, src: *const u8, stride: usize) {
        let (rows, bytes) = self.config.of(T);
        self.data[T] = [[0; TILE_BYTES]; TILE_ROWS];
        for r in 0..rows {
            // SAFETY: the caller's contract.
            let row = unsafe { std::slice::from_raw_parts(src.add(r * stride), bytes) };
            self.data[T][r][..bytes].copy_from_slice(row);
        }
    }

    unsafe fn zero<const T: usize>(&mut self) {
        self.data[T] = [[0; TILE_BYTES]; TILE_ROWS];
    }

    // Index arithmetic over three tiles at once.
    #[allow(clippy::needless_range_loop)]
    unsafe fn dot<const C: usize, const A: usize, const B: usize>(&mut self) {
        let (m_rows, c_bytes) = self.config.of(C);
        let (_, a_bytes) = self.config.of(A);
        let (b_rows, _) = self.config.of(B);
        let (n_cols, k4) = (c_bytes / 4, (a_bytes / 4).min(b_rows));
        let (a, b) = (self.data[A], self.data[B]);
        for m in 0..m_rows {
            for n in 0..n_cols {
                let mut sum =
                    i32::from_le_bytes(self.data[C][m][4 * n..4 * n + 4].try_into().unwrap());
                for k in 0..k4 {
                    for i in 0..4 {
                        let (x, w) = (a[m][4 * k + i] as i8, b[k][4 * n + i] as i8);
                        sum = sum.wrapping_add(x as i32 * w as i32);
                    }
                }
                self.data[C][m][4 * n..4 * n + 4].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }

    unsafe fn store<const T: usize>(&mut self, dst: *mut u8, stride: usize) {
        let (rows, bytes) = self.config.of(T);
        for r in 0..rows {
            // SAFETY: the caller's contract.
            let row = unsafe { std::slice::from_raw_parts_mut(dst.add(r * stride), bytes) };
            row.copy_from_slice(&self.data[T][r][..bytes]);
        }
    }

    unsafe fn release(&mut self) {
        *self = Self::default();
    }
}

/// Whether this process may run AMX int8 tiles, checked once: `Ok` after the probe
/// multiply gave the right integers, else why not (for the startup log).
pub fn amx_status() -> Result<(), String> {
    static STATUS: OnceLock<Result<(), String>> = OnceLock::new();
    STATUS.get_or_init(check).clone()
}

#[cfg(not(target_arch = "x86_64"))]
fn check() -> Result<(), String> {
    Err("AMX is an x86-64 unit".into())
}

#[cfg(target_arch = "x86_64")]
fn check() -> Result<(), String> {
    use std::arch::x86_64::__cpuid_count;
    // SAFETY: CPUID leaf 7 exists on every x86-64 CPU that runs this program (std's
    // feature detection reads it too).
    let leaf7 = __cpuid_count(7, 0);
    let (tile, int8) = (leaf7.edx >> 24 & 1 == 1, leaf7.edx >> 25 & 1 == 1);
    if !(tile && int8) {
        return Err("CPUID does not advertise AMX-TILE and AMX-INT8".into());
    }
    if !std::is_x86_feature_detected!("xsave") || !std::is_x86_feature_detected!("avx512f") {
        return Err("no XSAVE or AVX-512F beside AMX".into());
    }
    // SAFETY: XSAVE (and so XGETBV) is present, checked above; XCR0 is register 0.
    let xcr0 = unsafe { xgetbv0() };
    if xcr0 >> 17 & 3 != 3 {
        return Err(format!(
            "the OS has not enabled the tile state (XCR0 = {xcr0:#x})"
        ));
    }
    request_permission()?;
    probe_in_child()?;
    // SAFETY: permission granted, and the same instructions just ran in a child without
    // trapping.
    if unsafe { probe() } {
        Ok(())
    } else {
        Err("a probe tile multiply gave wrong integers".into())
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "xsave")]
unsafe fn xgetbv0() -> u64 {
    std::arch::x86_64::_xgetbv(0)
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: once per process, before any tile
/// instruction on any thread.
#[cfg(target_arch = "x86_64")]
fn request_permission() -> Result<(), String> {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "the kernel refused the tile state (arch_prctl: {})",
            std::io::Error::last_os_error()
        ))
    }
}

/// Runs [`probe`] in a forked child, so a trap ends the child, not this process. The child
/// touches no lock and allocates nothing: it runs the probe and exits.
#[cfg(target_arch = "x86_64")]
fn probe_in_child() -> Result<(), String> {
    // SAFETY: the child only runs `probe` (registers and stack memory) and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!(
            "fork for the AMX probe: {}",
            std::io::Error::last_os_error()
        ));
    }
    if pid == 0 {
        // SAFETY: as above; permission was granted before the fork, and it is inherited.
        let ok = unsafe { probe() };
        // SAFETY: ends the child without running the parent's destructors or atexit hooks.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    if waited != pid {
        return Err(format!(
            "waiting for the AMX probe: {}",
            std::io::Error::last_os_error()
        ));
    }
    if libc::WIFSIGNALED(status) {
        return Err(format!(
            "a tile instruction trapped (signal {})",
            libc::WTERMSIG(status)
        ));
    }
    match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        _ => Err("a probe tile multiply gave wrong integers".into()),
    }
}

/// One `tdpbssd` of known signed bytes against their product computed here, through
/// every instruction [`TileUnit`] names.
///
/// # Safety
/// The tile state must be permitted ([`request_permission`]) and the CPU must have AMX.
#[cfg(target_arch = "x86_64")]
unsafe fn probe() -> bool {
    let mut a = [[0u8; 64]; TILE_ROWS];
    let mut b = [[0u8; 64]; TILE_ROWS];
    for (m, row) in a.iter_mut().enumerate() {
        for (k, v) in row.iter_mut().enumerate() {
            *v = ((m * 7 + k * 3) % 255) as u8 ^ 0x5A;
        }
    }
    for (k, row) in b.iter_mut().enumerate() {
        for (n, v) in row.iter_mut().enumerate() {
            *v = ((k * 11 + n * 5) % 253) as u8 ^ 0xA5;
        }
    }
    let config = TileConfig::new()
        .shape(0, 16, 64)
        .shape(2, 16, 64)
        .shape(4, 16, 64);
    let mut c = [[0i32; 16]; TILE_ROWS];
    let mut hw = HwTiles;
    // SAFETY: the caller's contract; every buffer is 16 rows of 64 bytes.
    unsafe {
        hw.configure(&config);
        hw.load::<0>(a.as_ptr().cast(), 64);
        hw.load::<2>(b.as_ptr().cast(), 64);
        hw.zero::<4>();
        hw.dot::<4, 0, 2>();
        hw.store::<4>(c.as_mut_ptr().cast(), 64);
        hw.release();
    }
    (0..TILE_ROWS).all(|m| {
        (0..16).all(|n| {
            let want = (0..64).fold(0i32, |s, k| {
                s + (a[m][k] as i8 as i32) * (b[k / 4][4 * n + k % 4] as i8 as i32)
            });
            c[m][n] == want
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulated_unit_multiplies_as_tdpbssd_is_documented() {
        // 3 rows of A (8 bytes: two groups of four), B of 2 rows × 3 columns.
        let config = TileConfig::new()
            .shape(0, 3, 8)
            .shape(2, 2, 12)
            .shape(4, 3, 12);
        let a: [[i8; 8]; 3] = [
            [1, 2, 3, 4, 5, 6, 7, 8],
            [-1, -2, -3, -4, 127, -128, 0, 1],
            [0; 8],
        ];
        let b: [[i8; 12]; 2] = [
            [1, 1, 1, 1, 2, 0, 0, 0, -1, 0, 0, 1],
            [0, 0, 0, 1, 1, 1, 1, 1, 3, -3, 3, -3],
        ];
        let mut c = [[0i32; 3]; 3];
        let mut unit = EmulatedTiles::default();
        // SAFETY: the buffers have the configured shapes.
        unsafe {
            unit.configure(&config);
            unit.load::<0>(a.as_ptr().cast(), 8);
            unit.load::<2>(b.as_ptr().cast(), 12);
            unit.zero::<4>();
            unit.dot::<4, 0, 2>();
            unit.dot::<4, 0, 2>();
            unit.store::<4>(c.as_mut_ptr().cast(), 12);
        }
        for m in 0..3 {
            for n in 0..3 {
                let once: i32 = (0..8)
                    .map(|k| a[m][k] as i32 * b[k / 4][4 * n + k % 4] as i32)
                    .sum();
                assert_eq!(c[m][n], 2 * once, "C[{m}][{n}]");
            }
        }
    }

    #[test]
    fn amx_status_says_why_not_or_the_probe_passed() {
        match amx_status() {
            Ok(()) => println!("AMX available: the probe multiply gave the right integers"),
            Err(why) => {
                assert!(!why.is_empty());
                println!("SKIPPED the AMX probe: {why}");
            }
        }
    }
}
