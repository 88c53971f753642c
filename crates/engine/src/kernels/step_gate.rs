//! Turns between engines' steps on the shared compute pool: a decode-only step has the pool
//! to itself while it runs, and a prefill step waiting beside it gets a turn between decode
//! steps, `TURN_SHARE` of the decode step's time.
//!
//! Why steps and not only loops: with the loop-level priority alone (`compute_pool`'s
//! `Priority`), a prefill's engine thread stayed runnable between the decode's ~150 loops a
//! step, doing its own serial work or its tasks; on a machine with as many compute threads
//! as cores it was one thread too many, and the OS shared a core between it and the decode's
//! own thread (a decode beside a prefill took 1.6–1.9× its time alone on an idle 2-core VM,
//! docs/models.md). Here a prefill step's threads block while a decode step runs, so the
//! decode keeps every core, and the prefill runs in turns between decode steps.
//!
//! The decode's engine thread spends the turn blocked too (its own work before the next step
//! would otherwise wait for a core beside the prefill's threads), and the turn ends on the
//! prefill's side: from `turn_end` its threads stop at their next task and block, and the
//! first to stop wakes the decode's thread (`turn_over`). Left to its own timed wait, that
//! thread woke 3–7 ms late on the development VM even with both cores idle, and before the
//! prefill's threads stopped by themselves it waited for the OS to preempt one.
//!
//! What a turn costs the decode: at most `TURN_SHARE` of its step, plus the task each
//! prefill thread is inside when the turn ends (`quant::matmul`'s `TASK_MACS` keeps those
//! short); turns of at least `MIN_TURN` pay the switch every few tokens, not every token. What the prefill gets while a decode runs back to back: about
//! `TURN_SHARE / (1 + TURN_SHARE)` of the machine; all of it otherwise.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A prefill's turn after each decode step, as a share of that step's time: the decode's
/// time per token grows by this much and a little more (the bound is 1.5×).
pub const TURN_SHARE: f64 = 0.25;

/// The shortest turn given: owed turn time adds up over decode steps until it reaches this.
const MIN_TURN: Duration = Duration::from_millis(8);

/// A blocked thread rechecks at least this often: a safety net, not the wake-up path
/// (that is `changed`).
const RECHECK: Duration = Duration::from_millis(10);

/// After its turn ends, how long a prefill waits for the decode's next step before it goes
/// on: a decode engine that has run out of requests never starts one.
const NEXT_STEP_GRACE: Duration = Duration::from_millis(20);

pub struct StepGate {
    /// Decode-only steps running now: while any is, prefill steps' threads wait at the gate.
    latency_steps: AtomicUsize,
    /// Prefill steps begun and not ended (running, or waiting at the gate): a decode step
    /// that ends while any is gives them a turn.
    throughput_steps: AtomicUsize,
    /// When the current turn ends, in nanoseconds since `epoch`; 0 for none. Written under
    /// `turn`'s lock, read without it by prefill threads between tasks.
    turn_end: AtomicU64,
    /// Whether the turn that `turn_end` ends was given (not an empty one that only keeps
    /// the gate closed between two decode steps).
    given: AtomicBool,
    /// Held to change `latency_steps` and `turn_end` and to wait on `changed`; holds the
    /// turn time owed to prefill steps and not yet given.
    turn: Mutex<Duration>,
    /// Notified when the gate may have opened (a decode step ended) and when a turn may be
    /// needed no more (a prefill step ended).
    changed: Condvar,
    epoch: Instant,
}

impl Default for StepGate {
    fn default() -> Self {
        Self {
            latency_steps: AtomicUsize::new(0),
            throughput_steps: AtomicUsize::new(0),
            turn_end: AtomicU64::new(0),
            given: AtomicBool::new(false),
            turn: Mutex::new(Duration::ZERO),
            changed: Condvar::new(),
            epoch: Instant::now(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl StepGate {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Whether a prefill step's thread should wait: a decode step runs, or a turn has just
    /// ended and the decode's next step is about to begin.
    pub fn closed(&self) -> bool {
        if self.latency_steps.load(Relaxed) > 0 {
            return true;
        }
        let end = self.turn_end.load(Relaxed);
        end != 0 && (end..end + NEXT_STEP_GRACE.as_nanos() as u64).contains(&self.now())
    }

    /// Whether a turn has ended and the decode's next step is about to begin: a helper
    /// spinning now would hold the core the decode's thread is waking onto.
    pub fn awaits_decode(&self) -> bool {
        self.latency_steps.load(Relaxed) == 0 && self.given.load(Relaxed) && self.closed()
    }

    /// Called by a prefill thread that stops for the gate: if a turn has just ended, wakes
    /// the decode's engine thread now. Its own timer alone woke it 3–7 ms late on the
    /// development VM once the prefill's threads had left the cores idle.
    pub fn turn_over(&self) {
        if self.awaits_decode() {
            self.changed.notify_all();
        }
    }

    /// Blocks the calling thread (a prefill step's) while the gate is closed. Blocking, not
    /// yielding: a yielding thread is still runnable and the OS still gives it a core.
    pub fn wait_open(&self) {
        let mut guard = lock(&self.turn);
        self.turn_over();
        while self.closed() {
            guard = self
                .changed
                .wait_timeout(guard, RECHECK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A decode step begins: after the current turn, if a prefill still uses it.
    pub fn enter_latency(&self) -> Instant {
        let guard = self.wait_turn(lock(&self.turn));
        // Under the lock: a prefill thread checks `closed` under it before it waits, so it
        // either sees this step or is waiting when the step's end notifies.
        self.latency_steps.fetch_add(1, SeqCst);
        self.turn_end.store(0, SeqCst);
        self.given.store(false, SeqCst);
        drop(guard);
        Instant::now()
    }

    /// A decode step begun at `started` ends: prefill steps waiting get a turn, which this
    /// thread spends blocked.
    pub fn leave_latency(&self, started: Instant) {
        let took = started.elapsed();
        let mut owed = lock(&self.turn);
        self.latency_steps.fetch_sub(1, SeqCst);
        if self.throughput_steps.load(SeqCst) > 0 {
            // Turns of at least `MIN_TURN`: each switch between the two costs the decode
            // about a millisecond (threads waking, caches refilled), paid once a turn.
            *owed += took.mul_f64(TURN_SHARE);
            let now = self.now();
            if *owed >= MIN_TURN {
                self.turn_end
                    .fetch_max(now + owed.as_nanos() as u64, SeqCst);
                self.given.store(true, SeqCst);
                *owed = Duration::ZERO;
                self.changed.notify_all();
            } else {
                // No turn yet: the gate stays closed until the next decode step.
                self.turn_end.fetch_max(now.max(1), SeqCst);
            }
        } else {
            *owed = Duration::ZERO;
        }
        // The turn is spent here, blocked: this thread's own work before its next step
        // would otherwise run beside the prefill's threads and wait for a core.
        drop(self.wait_turn(owed));
    }

    /// Blocks until the current turn is over, or no prefill step is left to use it.
    fn wait_turn<'a>(&'a self, mut guard: MutexGuard<'a, Duration>) -> MutexGuard<'a, Duration> {
        loop {
            let (end, now) = (self.turn_end.load(SeqCst), self.now());
            if end <= now || self.throughput_steps.load(SeqCst) == 0 {
                return guard;
            }
            let left = Duration::from_nanos(end - now);
            guard = self
                .changed
                .wait_timeout(guard, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    pub fn enter_throughput(&self) {
        self.throughput_steps.fetch_add(1, SeqCst);
    }

    /// A prefill step ends: a decode step waiting out a turn need not wait for it.
    pub fn leave_throughput(&self) {
        let guard = lock(&self.turn);
        self.throughput_steps.fetch_sub(1, SeqCst);
        drop(guard);
        self.changed.notify_all();
    }
}
