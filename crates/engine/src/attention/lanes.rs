//! `Lanes`: the positions of one chunk that a query row sees, as lanes of the chunk.

use super::CHUNK;

/// Lanes `first..end` of a chunk: from the row's window start (0 where the window begins
/// before the chunk) up to and including the row itself (`CHUNK` where it lies past the
/// chunk). Lanes outside are left out of the max, get weight zero, and their values are
/// never read into the output, on every build alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lanes {
    pub(super) first: usize,
    pub(super) end: usize,
}

impl Lanes {
    /// Every lane of the chunk.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) const WHOLE: Self = Self {
        first: 0,
        end: CHUNK,
    };

    /// The lanes of the chunk at `start` that a row at `pos` whose window begins at
    /// `first_visible` sees; `None` where it sees none of them.
    #[inline(always)]
    pub(super) fn of(start: usize, pos: usize, first_visible: usize) -> Option<Self> {
        if pos < start || first_visible >= start + CHUNK {
            return None;
        }
        Some(Self {
            first: first_visible.saturating_sub(start),
            end: (pos - start + 1).min(CHUNK),
        })
    }

    /// Every lane of the chunk (what the x86 folds batch rows by).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline(always)]
    pub(super) fn is_whole(self) -> bool {
        self.first == 0 && self.end == CHUNK
    }

    #[inline(always)]
    pub(super) fn contains(self, lane: usize) -> bool {
        (self.first..self.end).contains(&lane)
    }

    /// A bit per lane seen, lane 0 lowest (the AVX-512 fold's mask).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline(always)]
    pub(super) fn mask(self) -> u16 {
        let below_end = if self.end >= CHUNK {
            u16::MAX
        } else {
            (1u16 << self.end) - 1
        };
        below_end & !((1u16 << self.first) - 1)
    }
}
