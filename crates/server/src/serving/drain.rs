//! `Drain`: the server's in-flight generation requests and whether it is draining (a
//! SIGTERM or Ctrl-C arrived): from that moment `/health` answers 503, so routers and load
//! balancers stop sending work here, new generation requests are refused with 503 (which
//! routers retry elsewhere), and the server exits once the requests it took have finished
//! and no new one has been refused for `QUIET` (a router that has not yet seen `/health` fail
//! still sends here; a 503 it retries beats a refused connection after the exit).

use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How long no request may have been refused before a drained server exits.
pub const QUIET: Duration = Duration::from_secs(1);

#[derive(Debug, Default, Clone, Copy)]
struct DrainState {
    draining: bool,
    in_flight: usize,
    /// When a request was last refused because of the drain.
    last_refused: Option<Instant>,
}

/// Shared by the generation routes (which admit requests) and the connection loop (which
/// starts the drain and waits for it to end).
#[derive(Debug)]
pub struct Drain {
    state: watch::Sender<DrainState>,
}

impl Default for Drain {
    fn default() -> Self {
        Self {
            state: watch::Sender::new(DrainState::default()),
        }
    }
}

/// One admitted request; dropping it (when its reply body is done or dropped) lets a drain end.
#[derive(Debug)]
pub struct Admitted {
    state: watch::Sender<DrainState>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.state.send_modify(|s| s.in_flight -= 1);
    }
}

impl Drain {
    /// Counts a new request in, unless a drain has started. Checking and counting happen
    /// under one lock, so no request slips in after a drain has seen the server idle.
    pub fn admit(&self) -> Option<Admitted> {
        let admitted = self.state.send_if_modified(|s| {
            if s.draining {
                s.last_refused = Some(Instant::now());
                return false;
            }
            s.in_flight += 1;
            true
        });
        admitted.then(|| Admitted {
            state: self.state.clone(),
        })
    }

    pub fn begin(&self) {
        self.state.send_modify(|s| s.draining = true);
    }

    pub fn is_draining(&self) -> bool {
        self.state.borrow().draining
    }

    pub fn in_flight(&self) -> usize {
        self.state.borrow().in_flight
    }

    /// Resolves once no admitted request is left.
    pub async fn idle(&self) {
        let mut watching = self.state.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = watching.wait_for(|s| s.in_flight == 0).await;
    }

    /// Resolves once no admitted request is left and none has been refused for `quiet`: the
    /// clients (routers) have stopped sending here.
    pub async fn settled(&self, quiet: Duration) {
        loop {
            self.idle().await;
            let last = self.state.borrow().last_refused;
            let since = last.map_or(quiet, |at| at.elapsed());
            if since >= quiet && self.in_flight() == 0 {
                return;
            }
            tokio::time::sleep(quiet.saturating_sub(since)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_refuses_new_requests_and_counts_the_admitted_ones_out() {
        let drain = Drain::default();
        let first = drain.admit().expect("admitted before the drain");
        assert_eq!(drain.in_flight(), 1);
        drain.begin();
        assert!(drain.is_draining());
        assert!(drain.admit().is_none());
        assert_eq!(drain.in_flight(), 1);
        drop(first);
        assert_eq!(drain.in_flight(), 0);
    }

    #[tokio::test]
    async fn settled_waits_until_nothing_was_refused_for_a_while() {
        let drain = Drain::default();
        drain.begin();
        assert!(drain.admit().is_none());
        let started = Instant::now();
        drain.settled(Duration::from_millis(100)).await;
        assert!(started.elapsed() >= Duration::from_millis(90));
        // Nothing refused at all: settled at once.
        let quiet = Drain::default();
        quiet.begin();
        let started = Instant::now();
        quiet.settled(Duration::from_secs(10)).await;
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn idle_waits_for_the_last_admitted_request() {
        let drain = std::sync::Arc::new(Drain::default());
        let admitted = drain.admit().unwrap();
        drain.begin();
        let waiting = tokio::spawn({
            let drain = drain.clone();
            async move { drain.idle().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(admitted);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("idle resolves once the request is done")
            .unwrap();
    }
}
