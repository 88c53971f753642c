//! How one step's attention is cut into work ([`Plan`]): a task per tile of a sequence's
//! query rows, or, for a lone decode row, per (KV head, partition), with a merge of its
//! partitions after; and [`Ctx`], what every task of the step reads. Cuts depend only on
//! positions, never on the batch, so a row's bits do not depend on what it is batched with.

use super::backends::Isa;
use super::{AttentionShape, PARTITION, TILE_ROWS};
use crate::forward_batch::BatchSeq;
use std::cell::RefCell;
use std::ops::Range;

/// One step's attention work: tiles of query rows, and for lone decode rows split by KV
/// head and partition (flash-decoding), their partitions and then their merge.
#[derive(Default)]
pub(super) struct Plan {
    /// The pool's tasks.
    pub(super) tasks: Vec<Task>,
    /// Run after the tasks, one per split row.
    pub(super) merges: Vec<Merge>,
    /// Split rows' partition states, `[kv_heads, parts, group, head_dim + 2]` per row.
    pub(super) partials: Vec<f32>,
}

#[derive(Clone)]
pub(super) enum Task {
    /// Batch rows `rows` (consecutive positions of sequence `seq`), every KV head.
    Tile { seq: usize, rows: Range<usize> },
    /// One (KV head, partition) of lone row `row`, into `partials[at..]`; `part` counts
    /// from position 0.
    Partition {
        seq: usize,
        row: usize,
        kv_head: usize,
        part: usize,
        at: usize,
    },
}

/// Merges lone row `row`'s `partials[at..at + len]` once its `parts` partitions are done.
pub(super) struct Merge {
    pub(super) row: usize,
    pub(super) parts: usize,
    pub(super) at: usize,
    pub(super) len: usize,
}

thread_local! {
    /// Reused across steps, so a steady-state step allocates nothing here.
    pub(super) static PLAN: RefCell<Plan> = RefCell::new(Plan::default());
}

impl Plan {
    pub(super) fn build(&mut self, ctx: &Ctx, seqs: &[BatchSeq]) {
        self.tasks.clear();
        self.merges.clear();
        let (g, d) = (ctx.group(), ctx.shape.head_dim);
        let mut len = 0;
        for (i, seq) in seqs.iter().enumerate() {
            let rows = seq.rows.clone();
            // A decode row splits by KV head (and partition) when few sequences share the
            // threads or its context is long, or one thread would do it all while the
            // others wait: one tile holds every KV head of its rows. Among many short
            // decodes the split would only add work per row. Both give the same bits.
            let pos = ctx.positions[rows.start];
            if rows.len() == 1 && (!ctx.many_seqs || pos >= 2 * PARTITION) {
                // The partitions the row's window reaches, in order.
                let first = ctx.shape.first_visible(pos) / PARTITION;
                let parts = pos / PARTITION + 1 - first;
                let at = len;
                for kv_head in 0..ctx.shape.num_kv_heads {
                    for part in first..first + parts {
                        self.tasks.push(Task::Partition {
                            seq: i,
                            row: rows.start,
                            kv_head,
                            part,
                            at: len,
                        });
                        len += g * (d + 2);
                    }
                }
                self.merges.push(Merge {
                    row: rows.start,
                    parts,
                    at,
                    len: len - at,
                });
                continue;
            }
            let mut start = rows.start;
            while start < rows.end {
                let end = (start + TILE_ROWS).min(rows.end);
                self.tasks.push(Task::Tile {
                    seq: i,
                    rows: start..end,
                });
                start = end;
            }
        }
        if self.partials.len() < len {
            self.partials.resize(len, 0.0);
        }
    }
}

pub(super) struct Ctx<'a> {
    pub(super) q: &'a [f32],
    pub(super) positions: &'a [usize],
    pub(super) shape: AttentionShape,
    /// Enough sequences to keep every thread busy one sequence at a time.
    pub(super) many_seqs: bool,
    pub(super) isa: Isa,
}

impl Ctx<'_> {
    pub(super) fn row_width(&self) -> usize {
        self.shape.num_heads * self.shape.head_dim
    }

    pub(super) fn group(&self) -> usize {
        self.shape.num_heads / self.shape.num_kv_heads
    }

    /// Query heads of `kv_head` at batch `row`, pre-multiplied by `log2(e) / sqrt(d)` so
    /// scores come out in base 2 and the softmax needs `exp2` only.
    #[inline(always)]
    pub(super) fn load_queries(&self, row: usize, kv_head: usize, dst: &mut [f32]) {
        let (g, d) = (self.group(), self.shape.head_dim);
        let scale = std::f32::consts::LOG2_E / (d as f32).sqrt();
        let start = row * self.row_width() + kv_head * g * d;
        for (o, x) in dst.iter_mut().zip(&self.q[start..start + g * d]) {
            *o = x * scale;
        }
    }
}
