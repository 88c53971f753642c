//! `SlidingWindow`: how many of the latest positions a sliding-window layer attends to.

use std::num::NonZeroUsize;

/// A local attention layer's window: a query at position `p` sees positions
/// `p - window + 1 ..= p` (itself and the `window - 1` before it), as transformers' sliding
/// mask (`kv_idx > q_idx - sliding_window`) and llama.cpp's (`p1 - p0 < n_swa`) both have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow(NonZeroUsize);

impl SlidingWindow {
    /// `None` for a window of 0, which no model has (it would see nothing, not even itself).
    pub fn new(positions: usize) -> Option<Self> {
        NonZeroUsize::new(positions).map(Self)
    }

    /// Positions a query sees, itself included.
    pub fn get(self) -> usize {
        self.0.get()
    }

    /// The first position a query at `pos` sees.
    #[inline(always)]
    pub fn first_visible(self, pos: usize) -> usize {
        (pos + 1).saturating_sub(self.0.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_of_w_sees_the_query_and_the_w_minus_one_positions_before_it() {
        let w = SlidingWindow::new(8).unwrap();
        assert_eq!(w.first_visible(0), 0);
        assert_eq!(w.first_visible(7), 0);
        assert_eq!(w.first_visible(8), 1);
        assert_eq!(w.first_visible(123), 116);
        assert_eq!(SlidingWindow::new(1).unwrap().first_visible(5), 5);
        assert!(SlidingWindow::new(0).is_none());
    }
}
