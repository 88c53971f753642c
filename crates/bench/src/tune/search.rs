//! How `tune` walks the configurations: the full grid, or coarse-to-fine, which runs every
//! other value of each knob and then climbs from the best configuration through its
//! untried neighbours.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::args::TuneSearch;
use crate::tune::space::{Point, TuneSpace};

/// How good a configuration turned out: meeting every objective comes first, then goodput,
/// then output throughput (which breaks ties between configurations with equal goodput).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    pub meets_every_slo: bool,
    pub goodput: f64,
    pub output_throughput: f64,
}

impl Score {
    /// A configuration that could not be measured (the server refused it, say).
    pub const FAILED: Score = Score {
        meets_every_slo: false,
        goodput: 0.0,
        output_throughput: 0.0,
    };

    pub fn cmp(&self, other: &Score) -> Ordering {
        self.meets_every_slo
            .cmp(&other.meets_every_slo)
            .then(self.goodput.total_cmp(&other.goodput))
            .then(self.output_throughput.total_cmp(&other.output_throughput))
    }
}

/// The best scored point; the earliest in grid order among equals, so ties resolve the same
/// whatever order the points were run in.
pub fn best(scores: &BTreeMap<Point, Score>) -> Option<&Point> {
    scores
        .iter()
        .reduce(|best, next| {
            if next.1.cmp(best.1) == Ordering::Greater {
                next
            } else {
                best
            }
        })
        .map(|(point, _)| point)
}

impl TuneSearch {
    /// The configurations to run next, given those already scored; empty when done.
    pub fn next(self, space: &TuneSpace, scores: &BTreeMap<Point, Score>) -> Vec<Point> {
        let untried = |points: Vec<Point>| -> Vec<Point> {
            points
                .into_iter()
                .filter(|p| space.is_valid(p) && !scores.contains_key(p))
                .collect()
        };
        match self {
            TuneSearch::Grid => untried(space.grid()),
            TuneSearch::CoarseToFine => {
                let coarse = untried(coarse_grid(space));
                if !coarse.is_empty() {
                    return coarse;
                }
                match best(scores) {
                    Some(best) => untried(neighbours(space, best)),
                    None => Vec::new(),
                }
            }
        }
    }
}

/// Every other index of each knob, always with its last, so a knob that only helps (or only
/// hurts) has its best end tried.
fn coarse_grid(space: &TuneSpace) -> Vec<Point> {
    let coarse_indices: Vec<Vec<usize>> = space
        .knobs
        .iter()
        .map(|knob| {
            let last = knob.values.len() - 1;
            let mut indices: Vec<usize> = (0..=last).step_by(2).collect();
            if indices.last() != Some(&last) {
                indices.push(last);
            }
            indices
        })
        .collect();
    let mut points = space.grid();
    points.retain(|point| {
        point
            .iter()
            .zip(&coarse_indices)
            .all(|(index, coarse)| coarse.contains(index))
    });
    // Where a budget below the sequence limit removed every coarse combination of a row,
    // the grid's own points keep the search from starting empty.
    if points.is_empty() {
        points = space.grid();
    }
    points
}

/// The points one step away along one knob.
fn neighbours(space: &TuneSpace, point: &[usize]) -> Vec<Point> {
    let mut out = Vec::new();
    for knob in 0..point.len() {
        for step in [-1isize, 1] {
            let Some(index) = point[knob].checked_add_signed(step) else {
                continue;
            };
            let mut next = point.to_vec();
            next[knob] = index;
            if space.is_valid(&next) {
                out.push(next);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::space::Knob;

    /// Runs `search` to the end against a scoring function, as `tune` does against servers;
    /// returns every point scored, in the order run.
    fn run_to_end(
        search: TuneSearch,
        space: &TuneSpace,
        mut score: impl FnMut(&Point) -> Score,
    ) -> (Vec<Point>, BTreeMap<Point, Score>) {
        let mut order = Vec::new();
        let mut scores = BTreeMap::new();
        loop {
            let batch = search.next(space, &scores);
            if batch.is_empty() {
                return (order, scores);
            }
            for point in batch {
                scores.insert(point.clone(), score(&point));
                order.push(point);
            }
        }
    }

    fn space(tokens: &[f64], seqs: &[f64]) -> TuneSpace {
        TuneSpace::new(vec![
            Knob {
                flag: "max-num-batched-tokens",
                values: tokens.to_vec(),
            },
            Knob {
                flag: "max-num-seqs",
                values: seqs.to_vec(),
            },
        ])
        .unwrap()
    }

    fn default_space() -> TuneSpace {
        space(
            &[64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0],
            &[8.0, 16.0, 32.0, 64.0, 128.0],
        )
    }

    fn goodput(value: f64, meets: bool) -> Score {
        Score {
            meets_every_slo: meets,
            goodput: value,
            output_throughput: value * 10.0,
        }
    }

    fn best_of(
        search: TuneSearch,
        space: &TuneSpace,
        surface: impl Fn(&[f64]) -> Score,
    ) -> (Point, usize) {
        let (order, scores) = run_to_end(search, space, |p| {
            let values: Vec<f64> = space.settings(p).iter().map(|(_, v)| *v).collect();
            surface(&values)
        });
        (best(&scores).unwrap().clone(), order.len())
    }

    #[test]
    fn coarse_to_fine_finds_the_grids_best_on_a_monotone_surface_in_fewer_runs() {
        let space = default_space();
        let surface = |v: &[f64]| goodput(v[0].log2() + 2.0 * v[1].log2(), true);
        let (grid_best, grid_runs) = best_of(TuneSearch::Grid, &space, surface);
        let (fine_best, fine_runs) = best_of(TuneSearch::CoarseToFine, &space, surface);
        assert_eq!(grid_runs, 29, "30 pairs less 64 tokens with 128 sequences");
        assert_eq!(fine_best, grid_best);
        assert_eq!(grid_best, vec![5, 4]);
        assert!(fine_runs < grid_runs / 2, "{fine_runs} runs");
    }

    #[test]
    fn coarse_to_fine_climbs_to_a_peak_between_coarse_values() {
        let space = default_space();
        // Goodput grows with the budget until P99 ITL breaks its objective past 512 tokens,
        // and peaks at 16 sequences: neither 512 nor 16 is a coarse value.
        let surface = |v: &[f64]| {
            let meets = v[0] <= 512.0;
            goodput(v[0].log2() - (v[1].log2() - 4.0).abs() * 3.0, meets)
        };
        let (grid_best, grid_runs) = best_of(TuneSearch::Grid, &space, surface);
        let (fine_best, fine_runs) = best_of(TuneSearch::CoarseToFine, &space, surface);
        assert_eq!(grid_best, vec![3, 1]);
        assert_eq!(fine_best, grid_best);
        assert!(fine_runs < grid_runs, "{fine_runs} of {grid_runs}");
    }

    #[test]
    fn the_grid_runs_every_valid_configuration_once() {
        let space = space(&[8.0, 64.0], &[16.0, 4.0]);
        let (order, _) = run_to_end(TuneSearch::Grid, &space, |_| Score::FAILED);
        assert_eq!(order, vec![vec![0, 1], vec![1, 0], vec![1, 1]]);
    }

    #[test]
    fn meeting_every_objective_outranks_a_higher_goodput() {
        assert_eq!(
            goodput(1.0, true).cmp(&goodput(9.0, false)),
            Ordering::Greater
        );
        assert_eq!(
            goodput(2.0, true).cmp(&goodput(1.0, true)),
            Ordering::Greater
        );
        let mut scores = BTreeMap::new();
        scores.insert(vec![0], goodput(9.0, false));
        scores.insert(vec![1], goodput(1.0, true));
        scores.insert(vec![2], goodput(1.0, true));
        assert_eq!(
            best(&scores),
            Some(&vec![1]),
            "ties go to the first in grid order"
        );
    }
}
