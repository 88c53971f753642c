//! Request-rate shaping: the arrival generator's gaps have the mean and spread asked for.

use std::time::Duration;

use tokenmill_bench::{ArrivalSchedule, RequestRate};

fn mean_and_cv(gaps: &[f64]) -> (f64, f64) {
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    (mean, variance.sqrt() / mean)
}

#[test]
fn poisson_arrivals_at_rate_r_have_mean_gap_one_over_r() {
    let (rate, count) = (20.0, 20_000);
    let schedule = ArrivalSchedule::new(count, RequestRate::PerSecond(rate), 1.0, 7).unwrap();
    let (mean, cv) = mean_and_cv(&schedule.gaps_s());
    // Exponential gaps: standard deviation equals the mean, so the sample mean's error is
    // (1/R)/sqrt(N); five of those is a bound a correct generator essentially never crosses.
    let bound = 5.0 * (1.0 / rate) / ((count - 1) as f64).sqrt();
    assert!(
        (mean - 1.0 / rate).abs() < bound,
        "mean gap {mean}, expected {} ± {bound}",
        1.0 / rate
    );
    assert!(
        (cv - 1.0).abs() < 0.05,
        "coefficient of variation {cv}, expected 1"
    );
}

#[test]
fn burstiness_is_the_gamma_shape_and_keeps_the_mean() {
    let (rate, count) = (5.0, 20_000);
    for burstiness in [0.25_f64, 4.0] {
        let schedule =
            ArrivalSchedule::new(count, RequestRate::PerSecond(rate), burstiness, 11).unwrap();
        let (mean, cv) = mean_and_cv(&schedule.gaps_s());
        let expected_cv = 1.0 / burstiness.sqrt();
        let bound = 5.0 * expected_cv * (1.0 / rate) / ((count - 1) as f64).sqrt();
        assert!(
            (mean - 1.0 / rate).abs() < bound,
            "burstiness {burstiness}: mean gap {mean}"
        );
        assert!(
            (cv - expected_cv).abs() < 0.1 * expected_cv,
            "burstiness {burstiness}: cv {cv}, expected {expected_cv}"
        );
    }
}

#[test]
fn first_request_leaves_at_once_and_offsets_only_grow() {
    let schedule = ArrivalSchedule::new(100, RequestRate::PerSecond(50.0), 1.0, 3).unwrap();
    assert_eq!(schedule.offsets()[0], Duration::ZERO);
    assert!(schedule.offsets().windows(2).all(|pair| pair[0] <= pair[1]));
}

#[test]
fn the_same_seed_gives_the_same_arrivals() {
    let a = ArrivalSchedule::new(50, RequestRate::PerSecond(3.0), 0.5, 42).unwrap();
    let b = ArrivalSchedule::new(50, RequestRate::PerSecond(3.0), 0.5, 42).unwrap();
    let c = ArrivalSchedule::new(50, RequestRate::PerSecond(3.0), 0.5, 43).unwrap();
    assert_eq!(a.offsets(), b.offsets());
    assert_ne!(a.offsets(), c.offsets());
}

#[test]
fn infinite_rate_sends_everything_at_once() {
    let schedule = ArrivalSchedule::new(10, RequestRate::Infinite, 1.0, 0).unwrap();
    assert!(schedule.offsets().iter().all(|offset| offset.is_zero()));
}

#[test]
fn non_positive_burstiness_is_an_error() {
    assert!(ArrivalSchedule::new(10, RequestRate::PerSecond(1.0), 0.0, 0).is_err());
    assert!(ArrivalSchedule::new(10, RequestRate::PerSecond(1.0), f64::NAN, 0).is_err());
}

#[test]
fn infinite_burstiness_makes_every_gap_exactly_one_over_the_rate() {
    let schedule = ArrivalSchedule::new(4, RequestRate::PerSecond(2.0), f64::INFINITY, 5).unwrap();
    let expected: Vec<Duration> = [0, 500, 1000, 1500]
        .into_iter()
        .map(Duration::from_millis)
        .collect();
    assert_eq!(schedule.offsets(), expected);
}

#[test]
fn leaders_leave_at_once_and_the_rest_follow_after_the_lead() {
    // The scenario: one long prompt, then four short ones 1 s later, 0.5 s apart.
    let schedule = ArrivalSchedule::new(4, RequestRate::PerSecond(2.0), f64::INFINITY, 5)
        .unwrap()
        .led_by(1, Duration::from_secs(1));
    let expected: Vec<Duration> = [0, 1000, 1500, 2000, 2500]
        .into_iter()
        .map(Duration::from_millis)
        .collect();
    assert_eq!(schedule.offsets(), expected);
    let two_leaders = ArrivalSchedule::new(2, RequestRate::Infinite, 1.0, 0)
        .unwrap()
        .led_by(2, Duration::ZERO);
    assert_eq!(two_leaders.offsets(), [Duration::ZERO; 4]);
}
