//! `ClassLatencies`: TTFT and end-to-end latency of one prompt-length class of a run, so a
//! short request's wait behind a long prompt shows apart from the long prompt's own time.

use crate::load::client::RequestRecord;
use crate::report::distribution::Distribution;
use crate::report::prompt_class::PromptClass;

/// The latencies of the requests of one class, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassLatencies {
    pub class: PromptClass,
    /// Requests of this class, failed ones included.
    pub requests: usize,
    /// Of those, the successful ones, which alone enter the latencies.
    pub completed: usize,
    pub ttft: Distribution,
    pub e2el: Distribution,
}

impl ClassLatencies {
    /// One entry per class that holds a request, short before long, each request classed by
    /// its measured prompt tokens (the server's count when it gave one). Empty when every
    /// request falls in one class: the run's overall latencies then say it all.
    pub fn split(records: &[RequestRecord], threshold: usize, percentiles: &[f64]) -> Vec<Self> {
        let classed: Vec<(PromptClass, &RequestRecord)> = records
            .iter()
            .map(|r| (PromptClass::of(r.prompt_len, threshold), r))
            .collect();
        let present: Vec<PromptClass> = PromptClass::ALL
            .into_iter()
            .filter(|class| classed.iter().any(|(c, _)| c == class))
            .collect();
        if present.len() < 2 {
            return Vec::new();
        }
        present
            .into_iter()
            .map(|class| {
                let members: Vec<&RequestRecord> = classed
                    .iter()
                    .filter(|(c, _)| *c == class)
                    .map(|(_, r)| *r)
                    .collect();
                let replies: Vec<_> = members.iter().filter_map(|r| r.reply()).collect();
                let ttfts: Vec<f64> = replies.iter().map(|r| ms(r.ttft())).collect();
                let e2els: Vec<f64> = replies.iter().map(|r| ms(r.e2el())).collect();
                ClassLatencies {
                    class,
                    requests: members.len(),
                    completed: replies.len(),
                    ttft: Distribution::of(&ttfts, percentiles),
                    e2el: Distribution::of(&e2els, percentiles),
                }
            })
            .collect()
    }
}

fn ms(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::client::Reply;
    use std::time::{Duration, Instant};

    fn record(prompt_len: usize, ttft_ms: u64, end_ms: u64) -> RequestRecord {
        let start = Instant::now();
        RequestRecord {
            sent_at: start,
            finished_at: start + Duration::from_millis(end_ms),
            prompt_len,
            outcome: Ok(Reply {
                content_offsets: vec![
                    Duration::from_millis(ttft_ms),
                    Duration::from_millis(end_ms),
                ],
                usage_completion_tokens: Some(2),
                text: "ab".into(),
                drafts: None,
            }),
        }
    }

    fn failed(prompt_len: usize) -> RequestRecord {
        let start = Instant::now();
        RequestRecord {
            sent_at: start,
            finished_at: start,
            prompt_len,
            outcome: Err("timed out".into()),
        }
    }

    #[test]
    fn requests_split_at_the_threshold_with_each_class_summarised_alone() {
        // One long prompt of 8000 tokens and four short ones that waited behind it.
        let records = vec![
            record(8000, 3000, 3500),
            record(8, 2000, 2100),
            record(8, 1500, 1600),
            record(8, 1000, 1100),
            record(8, 500, 600),
            failed(8),
        ];
        let classes = ClassLatencies::split(&records, 8000, &[99.0]);
        assert_eq!(classes.len(), 2);
        let (short, long) = (&classes[0], &classes[1]);
        assert_eq!(short.class, PromptClass::Short);
        assert_eq!((short.requests, short.completed), (5, 4));
        assert_eq!(short.ttft.median, 1250.0);
        assert_eq!(short.ttft.max, 2000.0);
        assert_eq!(short.ttft.mean, 1250.0);
        assert!((short.ttft.percentiles[0].1 - 1985.0).abs() < 1e-9);
        assert_eq!(short.e2el.median, 1350.0);
        assert_eq!(short.e2el.max, 2100.0);
        assert_eq!(long.class, PromptClass::Long);
        assert_eq!((long.requests, long.completed), (1, 1));
        assert_eq!((long.ttft.median, long.ttft.max), (3000.0, 3000.0));
        assert_eq!(long.e2el.max, 3500.0);
    }

    #[test]
    fn a_run_in_one_class_has_no_split() {
        let records = vec![record(8, 10, 20), record(9, 10, 20)];
        assert!(ClassLatencies::split(&records, 1024, &[99.0]).is_empty());
        assert!(ClassLatencies::split(&[], 1024, &[99.0]).is_empty());
        // A lower threshold puts the same requests in two classes.
        assert_eq!(ClassLatencies::split(&records, 9, &[99.0]).len(), 2);
    }

    #[test]
    fn a_class_whose_requests_all_failed_is_listed_with_zero_latencies() {
        let records = vec![record(8, 10, 20), failed(5000)];
        let classes = ClassLatencies::split(&records, 1024, &[]);
        assert_eq!((classes[1].requests, classes[1].completed), (1, 0));
        assert_eq!(classes[1].ttft.max, 0.0);
    }
}
