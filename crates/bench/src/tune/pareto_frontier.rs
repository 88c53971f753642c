//! The Pareto frontier of throughput against a latency: the configurations no other beats on
//! both at once.

/// Indices of the points no other point dominates (as fast or faster and at least as much
/// throughput, strictly better in one), in order of rising latency. Points are
/// `(latency, throughput)`; equal points are all kept.
pub fn pareto_frontier(points: &[(f64, f64)]) -> Vec<usize> {
    let dominates =
        |a: (f64, f64), b: (f64, f64)| a.0 <= b.0 && a.1 >= b.1 && (a.0 < b.0 || a.1 > b.1);
    let mut frontier: Vec<usize> = (0..points.len())
        .filter(|&i| !points.iter().any(|&other| dominates(other, points[i])))
        .collect();
    frontier.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
    frontier
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dominated_points_leave_the_frontier() {
        let points = [
            (30.0, 900.0), // 0: fastest throughput, slow
            (10.0, 500.0), // 1: frontier
            (12.0, 400.0), // 2: slower and less than 1
            (5.0, 100.0),  // 3: the fastest
            (30.0, 800.0), // 4: as slow as 0 with less
            (20.0, 700.0), // 5: frontier
        ];
        assert_eq!(pareto_frontier(&points), vec![3, 1, 5, 0]);
    }

    #[test]
    fn equal_points_are_both_kept_and_one_point_is_its_own_frontier() {
        assert_eq!(pareto_frontier(&[(1.0, 2.0), (1.0, 2.0)]), vec![0, 1]);
        assert_eq!(pareto_frontier(&[(3.0, 4.0)]), vec![0]);
        assert!(pareto_frontier(&[]).is_empty());
    }
}
