//! `for_each_row`: a row-wise loop on the compute pool, split so the result never depends on it.

use crate::kernels::compute_pool::ComputePool;

/// Floats of per-token work one pool task takes: a parallel loop over less costs more than
/// it saves, and Qwen3's per-head norms (rows of 128) in tasks of eight rows spent more
/// time handing out tasks than normalizing.
const TASK_FLOATS: usize = 8192;

/// Runs `f` on each `width`-wide row of `x` (with its index), on the compute pool when
/// there are at least two tasks' worth of rows. Rows are independent, so the result never
/// depends on the split.
pub(crate) fn for_each_row(
    x: &mut [f32],
    width: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    let width = width.max(1);
    let per_task = TASK_FLOATS.div_ceil(width);
    if x.len() / width >= 2 * per_task {
        ComputePool::global().for_each_chunk_mut(x, per_task * width, |t, rows| {
            for (i, row) in rows.chunks_exact_mut(width).enumerate() {
                f(t * per_task + i, row);
            }
        });
    } else {
        x.chunks_exact_mut(width)
            .enumerate()
            .for_each(|(i, row)| f(i, row));
    }
}
