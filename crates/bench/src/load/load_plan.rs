//! Sends the requests on their arrival schedule, within the concurrency limit, and records them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;

use crate::load::arrivals::ArrivalSchedule;
use crate::load::bench_request::BenchRequest;
use crate::load::client::{self, RequestRecord, RequestTarget};
use crate::load::progress::Progress;

/// How requests are released: when each may leave, and how many may be in flight.
#[derive(Clone, Debug)]
pub struct LoadPlan {
    pub schedule: ArrivalSchedule,
    pub max_concurrency: Option<usize>,
}

/// Records of every request, in dataset order, plus the most that were in flight at once.
#[derive(Debug)]
pub struct LoadOutcome {
    pub records: Vec<RequestRecord>,
    pub peak_in_flight: usize,
}

/// Live count of requests between send and end of stream.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl InFlight {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LoadPlan {
    pub fn new(schedule: ArrivalSchedule, max_concurrency: Option<usize>) -> anyhow::Result<Self> {
        if max_concurrency == Some(0) {
            anyhow::bail!("--max-concurrency must be at least 1");
        }
        Ok(LoadPlan {
            schedule,
            max_concurrency,
        })
    }

    /// Sends `requests[i]` at schedule offset `i`. A request that arrives while the limit is
    /// reached waits for a free slot, so arrival times stay independent of the server's speed.
    pub async fn execute(
        &self,
        target: &Arc<RequestTarget>,
        requests: &[BenchRequest],
        progress: &Arc<Progress>,
    ) -> anyhow::Result<LoadOutcome> {
        if requests.len() != self.schedule.offsets().len() {
            anyhow::bail!(
                "{} requests but {} arrival times",
                requests.len(),
                self.schedule.offsets().len()
            );
        }
        let limiter = Arc::new(Semaphore::new(
            self.max_concurrency.unwrap_or(Semaphore::MAX_PERMITS),
        ));
        let in_flight = Arc::new(InFlight::default());
        let start = tokio::time::Instant::now();
        let mut handles = Vec::with_capacity(requests.len());
        for (request, offset) in requests.iter().zip(self.schedule.offsets()) {
            tokio::time::sleep_until(start + *offset).await;
            let (target, request, limiter) = (target.clone(), request.clone(), limiter.clone());
            let (in_flight, progress) = (in_flight.clone(), progress.clone());
            handles.push(tokio::spawn(async move {
                let _slot = limiter
                    .acquire_owned()
                    .await
                    .expect("the limiter is never closed");
                in_flight.enter();
                progress.request_started();
                let record = client::send(&target, &request).await;
                in_flight.leave();
                progress.request_finished(record.outcome.is_ok());
                record
            }));
        }
        let mut records = Vec::with_capacity(handles.len());
        for handle in handles {
            records.push(handle.await?);
        }
        Ok(LoadOutcome {
            records,
            peak_in_flight: in_flight.peak.load(Ordering::SeqCst),
        })
    }
}

/// Sends `count` requests (cycling through the dataset) and throws the records away, so the
/// measured run starts with warm caches and connections.
pub async fn warm_up(
    target: &Arc<RequestTarget>,
    requests: &[BenchRequest],
    count: usize,
    max_concurrency: Option<usize>,
) -> anyhow::Result<()> {
    if count == 0 || requests.is_empty() {
        return Ok(());
    }
    let warmups: Vec<BenchRequest> = requests.iter().cycle().take(count).cloned().collect();
    let schedule = ArrivalSchedule::new(
        count,
        crate::load::request_rate::RequestRate::Infinite,
        1.0,
        0,
    )?;
    let progress = Arc::new(Progress::new("warm-up", count, false));
    let outcome = LoadPlan::new(schedule, max_concurrency)?
        .execute(target, &warmups, &progress)
        .await?;
    let failed = outcome
        .records
        .iter()
        .filter(|r| r.outcome.is_err())
        .count();
    if failed > 0 {
        eprintln!("warning: {failed} of {count} warm-up requests failed");
    }
    Ok(())
}

/// Seconds from the first send to the last finish: the span the throughputs divide by.
pub fn span_s(records: &[RequestRecord]) -> f64 {
    let first: Option<Instant> = records.iter().map(|r| r.sent_at).min();
    let last: Option<Instant> = records.iter().map(|r| r.finished_at).max();
    match (first, last) {
        (Some(first), Some(last)) => (last - first).as_secs_f64(),
        _ => 0.0,
    }
}
