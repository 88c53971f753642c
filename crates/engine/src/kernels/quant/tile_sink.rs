//! Where finished tiles go ([`TileSink`]): straight into the result's columns, which may
//! span several matrices and be added to ([`OutputWriter`]), or gathered in pairs and
//! combined as they are stored ([`PairWriter`], SwiGLU's gate and up). Each parallel task
//! owns whole groups of columns, so no task needs a private buffer copied into place.

use super::tile::TileOut;
use super::{MR, NR};
use std::marker::PhantomData;

/// Where a matmul's tiles go as parallel tasks finish them, each task owning whole groups
/// `cols` of the result.
pub(super) trait TileSink: Sync {
    /// Weight groups a task's range is a multiple of (a pair sink needs both halves).
    fn groups_per_step(&self) -> usize;

    /// The writer of activation rows `i0..i0 + mr`'s tiles in one task's columns (ending
    /// at `cols_end`), handed every group (of `gr` weight rows) of them in ascending order.
    ///
    /// # Safety
    /// No other thread may access those rows' elements of the task's columns meanwhile.
    unsafe fn emitter(
        &self,
        i0: usize,
        mr: usize,
        cols_end: usize,
        gr: usize,
    ) -> impl FnMut(usize, &TileOut);
}

impl TileSink for OutputWriter<'_> {
    fn groups_per_step(&self) -> usize {
        1
    }

    unsafe fn emitter(
        &self,
        i0: usize,
        mr: usize,
        cols_end: usize,
        gr: usize,
    ) -> impl FnMut(usize, &TileOut) {
        move |g, tile| {
            let c = g * gr;
            let width = (cols_end - c).min(gr);
            // SAFETY: the columns are the task's (the caller's contract).
            unsafe { self.write_tile(i0, c, &tile[..mr], width) };
        }
    }
}

/// The `[m, n / 2]` output of [`QuantMatrix::matmul_pairs_into`]: even groups' tiles (`a`)
/// and odd groups' (`b`) are gathered side by side, then combined a run of columns at a time.
pub(super) struct PairWriter<'a, F> {
    pub(super) out: *mut f32,
    pub(super) width: usize,
    pub(super) m: usize,
    pub(super) combine: F,
    pub(super) _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: tasks write disjoint columns (`emitter`'s contract).
unsafe impl<F: Sync> Sync for PairWriter<'_, F> {}

impl<F> TileSink for PairWriter<'_, F>
where
    F: Fn(&[f32], &[f32], &mut [f32]) + Sync,
{
    fn groups_per_step(&self) -> usize {
        2
    }

    unsafe fn emitter(
        &self,
        i0: usize,
        mr: usize,
        cols_end: usize,
        gr: usize,
    ) -> impl FnMut(usize, &TileOut) {
        assert!(i0 + mr <= self.m);
        // The task's last group (a `b` group: tasks hold whole pairs).
        let last = cols_end.div_ceil(gr) - 1;
        let (mut a, mut b) = ([[0f32; PAIR_RUN]; MR], [[0f32; PAIR_RUN]; MR]);
        let (mut col, mut filled) = (0, 0);
        move |g, tile| {
            // Gather a run of pairs, then combine each row's run in one call, so `combine`
            // runs over whole vectors even for one activation row.
            let half = if g.is_multiple_of(2) { &mut a } else { &mut b };
            for (dst, src) in half.iter_mut().zip(tile).take(mr) {
                dst[filled..filled + gr].copy_from_slice(&src[..gr]);
            }
            if g.is_multiple_of(2) {
                if filled == 0 {
                    col = (g / 2) * gr;
                }
                return;
            }
            filled += gr;
            if filled < PAIR_RUN && g < last {
                return;
            }
            for (i, (a, b)) in a.iter().zip(&b).take(mr).enumerate() {
                // SAFETY: columns `col..col + filled` are this task's pairs, inside the
                // `[m, width]` output, and `i0 + i < m`; exclusive by the caller's contract.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        self.out.add((i0 + i) * self.width + col),
                        filled,
                    )
                };
                (self.combine)(&a[..filled], &b[..filled], dst);
            }
            filled = 0;
        }
    }
}

/// Output columns of pairs gathered before they are combined: eight 8-lane vectors a row.
const PAIR_RUN: usize = 64;

/// Most matrices one matmul writes side by side (Q, K and V).
const MAX_OUTPUTS: usize = 4;

/// The `[m, n]` result as parallel tasks store it, each owning a disjoint column range, so
/// no task needs a private buffer copied into place later. Its columns may go to several
/// row-major matrices (`[m, width_i]`), and may be added to what is there.
pub(super) struct OutputWriter<'a> {
    /// `(first column, width, base pointer)` per output matrix, in column order.
    segments: [(usize, usize, *mut f32); MAX_OUTPUTS],
    count: usize,
    m: usize,
    add: bool,
    /// Holds the mutable borrows of the outputs, so nothing else can touch them meanwhile.
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: `write`'s contract makes concurrent writers touch disjoint elements.
unsafe impl Sync for OutputWriter<'_> {}

impl<'a> OutputWriter<'a> {
    pub(super) fn new(outs: &'a mut [&mut [f32]], m: usize, n: usize, add: bool) -> Self {
        assert!(outs.len() <= MAX_OUTPUTS, "at most {MAX_OUTPUTS} outputs");
        let mut segments = [(0, 0, std::ptr::null_mut()); MAX_OUTPUTS];
        let mut first = 0;
        for (seg, out) in segments.iter_mut().zip(outs.iter_mut()) {
            let width = out.len().checked_div(m).unwrap_or(0);
            assert_eq!(out.len(), m * width, "an output is not [m, width]");
            *seg = (first, width, out.as_mut_ptr());
            first += width;
        }
        assert!(
            m == 0 || first == n,
            "output widths add up to {first}, not {n}"
        );
        Self {
            segments,
            count: outs.len(),
            m,
            add,
            _out: PhantomData,
        }
    }

    /// Stores (or adds) the first `width` columns of each of `rows` at
    /// `[row0 + i, col..col + width]`. Finds the output once for the whole tile when its
    /// columns lie in one (always, for outputs whose widths are multiples of [`NR`]).
    ///
    /// # Safety
    /// No other thread may access those elements concurrently.
    #[inline]
    unsafe fn write_tile(&self, row0: usize, col: usize, rows: &[[f32; NR]], width: usize) {
        let seg = self.segments[..self.count]
            .iter()
            .find(|&&(first, w, _)| col >= first && col + width <= first + w);
        let Some(&(first, w, ptr)) = seg else {
            for (i, row) in rows.iter().enumerate() {
                // SAFETY: the caller's contract.
                unsafe { self.write(row0 + i, col, &row[..width]) };
            }
            return;
        };
        assert!(row0 + rows.len() <= self.m);
        for (i, row) in rows.iter().enumerate() {
            // SAFETY: `col - first + width <= w` and `row0 + i < m`, so in bounds of this
            // `[m, w]` output; exclusive by the caller's contract.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(ptr.add((row0 + i) * w + col - first), width)
            };
            // A whole group's width is a constant, so the copy is two moves, not a memcpy call.
            match (self.add, <&mut [f32; NR]>::try_from(&mut *dst)) {
                (false, Ok(full)) => *full = *row,
                (true, Ok(full)) => full.iter_mut().zip(row).for_each(|(d, v)| *d += v),
                (false, Err(_)) => dst.copy_from_slice(&row[..width]),
                (true, Err(_)) => dst.iter_mut().zip(row).for_each(|(d, v)| *d += v),
            }
        }
    }

    /// Stores (or adds) `vals` at `[row, col..col + vals.len()]` of the whole result.
    ///
    /// # Safety
    /// No other thread may access those elements concurrently.
    unsafe fn write(&self, row: usize, col: usize, vals: &[f32]) {
        assert!(row < self.m);
        let (mut col, mut vals) = (col, vals);
        for &(first, width, ptr) in &self.segments[..self.count] {
            if vals.is_empty() {
                break;
            }
            if col >= first + width {
                continue;
            }
            let take = vals.len().min(first + width - col);
            // SAFETY: `col - first + take <= width` and `row < m`, so in bounds of this
            // `[m, width]` output; exclusive by the caller's contract.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(ptr.add(row * width + col - first), take);
                if self.add {
                    dst.iter_mut().zip(&vals[..take]).for_each(|(d, v)| *d += v);
                } else {
                    dst.copy_from_slice(&vals[..take]);
                }
            }
            col += take;
            vals = &vals[take..];
        }
        assert!(vals.is_empty(), "columns past the result's width");
    }
}
