//! `ReadBandwidth`: the machine's memory read rate, measured on the compute pool at the moment
//! it is asked, so a benchmark can set a decode step against the roofline of that same moment
//! (on a shared machine the rate moves by 2× within an hour).

use crate::kernels::huge_buf::HugeBuf;
use rayon::prelude::*;
use std::time::Instant;

/// A buffer far larger than any cache, read by every thread of the compute pool. It sits on
/// huge pages, as the weights do: on 4 KiB pages the same reads run ~25% slower here, and the
/// roofline is what the machine can do.
pub struct ReadBandwidth {
    buf: HugeBuf<f32>,
}

impl ReadBandwidth {
    /// A probe over `bytes` of memory (256 MiB is several times any L3 we land on).
    pub fn new(bytes: usize) -> Self {
        let mut buf = HugeBuf::zeroed(bytes / size_of::<f32>());
        // Written, not left zero: untouched pages would all read the one shared zero page.
        buf.fill(1.0);
        Self { buf }
    }

    /// Best of `reps` full reads, in bytes per second.
    pub fn measure(&self, reps: usize) -> f64 {
        let mut best = 0.0f64;
        for _ in 0..reps.max(1) {
            let start = Instant::now();
            let sum: f32 = self.buf.par_chunks(1 << 16).map(sum_chunk).sum();
            std::hint::black_box(sum);
            best = best.max(size_of_val(&self.buf[..]) as f64 / start.elapsed().as_secs_f64());
        }
        best
    }
}

/// Sixteen independent sums, so the adds keep up with memory rather than with their latency.
fn sum_chunk(c: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    for x in c.chunks_exact(16) {
        for i in 0..16 {
            acc[i] += x[i];
        }
    }
    acc.iter().sum()
}
