//! The matmuls of [`QuantMatrix`] and what runs them: the activations quantized once, the
//! output columns cut into parallel tasks that fit L2, and each task's tiles run on the
//! [`TileKernel`] that [`tiles`] picks from the `CpuKernel`: the one place an instruction
//! set is chosen. `k` is never split across tasks, so a row's result does not depend on
//! the batch.

use super::activations::{Input, QuantizedActivations, XRow};
#[cfg(target_arch = "aarch64")]
use super::neon::Neon;
use super::portable::Portable;
use super::quant_matrix::QuantMatrix;
use super::tile::{Rows, TileKernel, TileOut};
use super::tile_sink::{OutputWriter, PairWriter, TileSink};
use super::weight_format::WeightFormat;
#[cfg(target_arch = "x86_64")]
use super::x86::{Amx, AmxEmulated, Avx2, Avx512Vnni, AvxVnni};
use super::{BLOCK, MR};
use crate::kernels::compute_pool::ComputePool;
use crate::kernels::cpu_kernel::CpuKernel;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Range;

/// Below this many multiply-adds, a rayon fork costs more than it saves.
const MIN_PARALLEL_MACS: usize = 1 << 18;
/// Weight bytes per parallel task at most, so a task's weights stay in L2 while every
/// activation tile streams past them.
const TASK_WEIGHT_BYTES: usize = 192 * 1024;
/// Multiply-adds per parallel task at most (about a third of a millisecond on one core),
/// by splitting a long batch's rows: another model's decode step, taking the pool, waits
/// for the task each thread is inside (`compute_pool`), and a prefill's task spanning a
/// whole 2,048-token chunk took milliseconds. The task's weights stay in L2 for its rows,
/// so its added weight reads from memory stay far below the bandwidth.
const TASK_MACS: usize = 1 << 24;

thread_local! {
    /// The calling thread's quantized activations, for the convenience entry points
    /// (`matmul`, `matmul_into`, `matmul_with`); the forward pass lends its own.
    static ACT_SCRATCH: RefCell<QuantizedActivations> = RefCell::new(QuantizedActivations::default());
}

impl QuantMatrix {
    /// `y[m, n] = x[m, k] · Wᵀ`, allocating the result. See [`matmul_into`](Self::matmul_into).
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let mut y = vec![0f32; m * self.rows];
        self.matmul_into(x, m, &mut y);
        y
    }

    /// `y[m, n] = x[m, k] · Wᵀ` on the process's [`CpuKernel::active`] path. Row `r` of the
    /// result is bitwise independent of `m`, of the other rows, and of the path.
    ///
    /// # Panics
    /// If `x` is not `[m, k]` or `y` not `[m, n]`.
    pub fn matmul_into(&self, x: &[f32], m: usize, y: &mut [f32]) {
        self.matmul_with(x, m, y, CpuKernel::active())
    }

    /// `y[m, n] += x[m, k] · Wᵀ`: the residual add done as the tiles are stored.
    ///
    /// # Panics
    /// As [`matmul_into`](Self::matmul_into).
    pub fn matmul_add_into(
        &self,
        x: &[f32],
        m: usize,
        y: &mut [f32],
        act: &mut QuantizedActivations,
    ) {
        let mut outs = [y];
        let out = OutputWriter::new(&mut outs, m, self.rows, true);
        self.run(x.into(), m, &out, CpuKernel::active(), act);
    }

    /// The result's columns written to several matrices side by side (stacked Q/K/V or
    /// gate/up), `outs[i]` being `[m, width_i]` with `Σ width_i = n`, so no split copy
    /// follows. `x` may carry a norm its rows go through first ([`Input`]).
    ///
    /// # Panics
    /// If the widths do not add up to `n`, or `x` is not `[m, k]`.
    pub fn matmul_split_into<'a>(
        &self,
        x: impl Into<Input<'a>>,
        m: usize,
        outs: &mut [&mut [f32]],
        act: &mut QuantizedActivations,
    ) {
        let out = OutputWriter::new(outs, m, self.rows, false);
        self.run(x.into(), m, &out, CpuKernel::active(), act);
    }

    /// On a matrix from [`interleave_pairs`](Self::interleave_pairs): `out[m, n / 2]` holds
    /// `combine(a, b)` of `a`'s and `b`'s results, element by element, computed as the
    /// tiles are stored (`combine` gets one row's run of up to 64 columns per call), so
    /// `a`'s and `b`'s results never reach memory. Each tile is the one `a`'s
    /// (or `b`'s) own matmul computes, so this equals combining their outputs afterwards.
    ///
    /// # Panics
    /// If `x` is not `[m, k]` or `out` not `[m, n / 2]`.
    pub fn matmul_pairs_into<'a>(
        &self,
        x: impl Into<Input<'a>>,
        m: usize,
        out: &mut [f32],
        act: &mut QuantizedActivations,
        combine: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
    ) {
        let gr = self.format.group_rows();
        assert!(self.rows.is_multiple_of(2 * gr), "not a matrix of pairs");
        assert_eq!(out.len(), m * self.rows / 2, "the output is not [m, n / 2]");
        let sink = PairWriter {
            out: out.as_mut_ptr(),
            width: self.rows / 2,
            m,
            combine,
            _out: PhantomData,
        };
        self.run(x.into(), m, &sink, CpuKernel::active(), act);
    }

    /// [`matmul_into`](Self::matmul_into) on a chosen path, so tests and benchmarks can
    /// compare every path this CPU runs.
    ///
    /// # Panics
    /// If the CPU cannot run `kernel`, or the shapes are wrong.
    pub fn matmul_with(&self, x: &[f32], m: usize, y: &mut [f32], kernel: CpuKernel) {
        let mut outs = [y];
        let out = OutputWriter::new(&mut outs, m, self.rows, false);
        ACT_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut act) => self.run(x.into(), m, &out, kernel, &mut act),
            Err(_) => self.run(
                x.into(),
                m,
                &out,
                kernel,
                &mut QuantizedActivations::default(),
            ),
        });
    }

    fn run(
        &self,
        x: Input,
        m: usize,
        out: &impl TileSink,
        kernel: CpuKernel,
        act: &mut QuantizedActivations,
    ) {
        assert!(
            kernel.is_supported(),
            "this CPU cannot run the {kernel} kernel"
        );
        assert_eq!(
            x.x.len(),
            m * self.cols,
            "QuantMatrix::matmul: x is not [m, k]"
        );
        if m == 0 || self.rows == 0 {
            return;
        }
        let n = self.rows;
        act.quantize(x, m, self.cols, self.format, kernel);
        let act = &*act;
        let task_cols = self.task_cols(m, out.groups_per_step());
        let task_rows = task_rows(m, task_cols * self.cols, tile_rows(self.format, kernel, m));
        let row_blocks = m.div_ceil(task_rows);
        let run = |t: usize| {
            let (c, r) = (t / row_blocks, t % row_blocks);
            let cols = c * task_cols..((c + 1) * task_cols).min(n);
            let rows = r * task_rows..((r + 1) * task_rows).min(m);
            // SAFETY: task `t` alone writes rows `rows` of columns `cols`; tasks partition
            // `0..m` x `0..n`.
            unsafe { self.task(act, cols, rows, out, kernel) }
        };
        let tasks = n.div_ceil(task_cols) * row_blocks;
        if m * n * self.cols < MIN_PARALLEL_MACS {
            (0..tasks).for_each(run);
        } else {
            ComputePool::global().run(tasks, &run);
        }
    }

    /// Output columns per parallel task: a multiple of `step` groups whose weights fit in L2,
    /// one task a thread for a single activation row and several (balance) for more.
    fn task_cols(&self, m: usize, step: usize) -> usize {
        let threads = ComputePool::global().threads();
        let gr = self.format.group_rows();
        let groups = self.rows.div_ceil(gr);
        let group_bytes = (self.cols * gr * self.format.quant_bytes() / BLOCK).max(1);
        let per_cache = (TASK_WEIGHT_BYTES / group_bytes).max(1);
        // One activation row streams its weights once, with nothing to reuse: one task a
        // thread (as far as the cache allows) starts the fewest weight streams and takes
        // the fewest claims. Larger batches want several tasks a thread for balance, each
        // at least two groups wide to amortize re-reading the activations.
        let want = if m == 1 {
            groups.div_ceil(threads)
        } else {
            groups.div_ceil(threads * 4).max(2)
        };
        // Whole pairs of groups, so the AVX-512 tiles leave no group to the narrower one.
        let unit = if step.is_multiple_of(2) {
            step
        } else {
            2 * step
        };
        want.min(per_cache).max(1).next_multiple_of(unit) * gr
    }

    /// Computes output columns `cols` (starting at a whole group) for rows `task_rows`
    /// (starting at a whole row tile).
    ///
    /// # Safety
    /// No other thread may access rows `task_rows` of columns `cols` of `out` meanwhile.
    unsafe fn task(
        &self,
        act: &QuantizedActivations,
        cols: Range<usize>,
        task_rows: Range<usize>,
        out: &impl TileSink,
        kernel: CpuKernel,
    ) {
        let rows = tile_rows(self.format, kernel, act.m);
        for i0 in task_rows.clone().step_by(rows) {
            let mr = (task_rows.end - i0).min(rows);
            // Rows past `mr` repeat the last one; the kernels ignore them.
            let x: [XRow; MR] = std::array::from_fn(|i| act.row(i0 + i.min(mr - 1)));
            // SAFETY: these columns belong to this task (caller's contract).
            let gr = self.format.group_rows();
            let mut emit = unsafe { out.emitter(i0, mr, cols.end, gr) };
            let groups = cols.start / gr..cols.end.div_ceil(gr);
            // The first row tile brings the task's weights from memory; the later ones find
            // them in cache (`task_cols` sizes a task for L2).
            let rows = Rows {
                x: &x,
                mr,
                first: i0 == task_rows.start,
            };
            tiles(self, kernel, groups, rows, &mut emit);
        }
    }
}

/// Activation rows per task of a matmul of `m` rows, each task `task_weights` weights wide:
/// whole row tiles (`tile`) of at most `TASK_MACS` multiply-adds, so a task's tiles are the
/// ones one task over every row would run, and its results the same bits.
fn task_rows(m: usize, task_weights: usize, tile: usize) -> usize {
    let tiles = (TASK_MACS / task_weights.max(1) / tile).max(1);
    (tiles * tile).min(m.next_multiple_of(tile))
}

/// Activation rows per tile of `format` on `kernel`, for a matmul of `m` rows: AMX tiles
/// only where there are more rows than the AVX-512 tiles take.
fn tile_rows(format: WeightFormat, kernel: CpuKernel, m: usize) -> usize {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = m;
    match kernel {
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Amx | CpuKernel::AmxEmulated if m <= Avx512Vnni::tile_rows(format) => {
            Avx512Vnni::tile_rows(format)
        }
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Amx => Amx::tile_rows(format),
        #[cfg(target_arch = "x86_64")]
        CpuKernel::AmxEmulated => AmxEmulated::tile_rows(format),
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx2 => Avx2::tile_rows(format),
        #[cfg(target_arch = "x86_64")]
        CpuKernel::AvxVnni => AvxVnni::tile_rows(format),
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx512Vnni => Avx512Vnni::tile_rows(format),
        #[cfg(target_arch = "aarch64")]
        CpuKernel::NeonDotprod => Neon::tile_rows(format),
        _ => Portable::tile_rows(format),
    }
}

/// Multiplies the activation rows by each weight group of `groups` on the chosen path.
fn tiles(
    m: &QuantMatrix,
    kernel: CpuKernel,
    groups: Range<usize>,
    rows: Rows,
    emit: &mut impl FnMut(usize, &TileOut),
) {
    match kernel {
        // SAFETY: `matmul_with` checked the CPU supports `kernel`.
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx2 => unsafe { Avx2::tiles(m, groups, rows, emit) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        CpuKernel::AvxVnni => unsafe { AvxVnni::tiles(m, groups, rows, emit) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx512Vnni => unsafe { Avx512Vnni::tiles(m, groups, rows, emit) },
        // SAFETY: as above (AMX includes `amx_status`).
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Amx => unsafe { Amx::tiles(m, groups, rows, emit) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        CpuKernel::AmxEmulated => unsafe { AmxEmulated::tiles(m, groups, rows, emit) },
        // SAFETY: as above. K-quants have no NEON tile yet and take the portable rows.
        #[cfg(target_arch = "aarch64")]
        CpuKernel::NeonDotprod if !m.format.is_k_quant() => unsafe {
            Neon::tiles(m, groups, rows, emit)
        },
        // SAFETY: the portable tiles run on every CPU.
        _ => unsafe { Portable::tiles(m, groups, rows, emit) },
    }
}
