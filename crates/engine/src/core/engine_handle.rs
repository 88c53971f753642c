//! `EngineHandle`: runs the `Engine` on its own OS thread (not inside an async runtime)
//! and lets any thread add or abort requests. Each request gets its own event channel.
//!
//! A step that fails (an error, or a panic caught at the step boundary) finishes its batch's
//! requests with an error and the engine goes on: the failure may belong to that batch alone,
//! and the other requests deserve their answers. Failing steps back off rather than spin, and
//! `health` reports the engine unhealthy once several fail in a row or the thread has ended.

use crate::core::engine::Engine;
use crate::core::engine_limits::EngineLimits;
use crate::error::{EngineError, Result};
use crate::sched::request::{EmbedRequest, EngineRequest, Request, RequestEvent, SeqId};
use crate::sched::scheduler_stats::SchedulerStats;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

enum Command {
    /// Queues every request or none of them.
    Add {
        requests: Vec<(EngineRequest, UnboundedSender<RequestEvent>)>,
        arrival: Instant,
        /// Where the ids (or the reason for refusal) go.
        reply: Sender<Result<Vec<SeqId>>>,
    },
    Abort(SeqId),
    /// The external hashes of every prefix-cached block, read between steps.
    CachedBlocks(Sender<Vec<u64>>),
    Shutdown,
}

/// Cheap to clone; the engine thread stops when the last handle asks it to or drops.
#[derive(Clone)]
pub struct EngineHandle {
    commands: Sender<Command>,
    limits: EngineLimits,
    stats: Arc<Mutex<SchedulerStats>>,
    health: Arc<HealthState>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

/// Consecutive failed steps after which the engine reports itself unhealthy: one failure may
/// be one bad batch; several in a row mean the engine itself is broken.
pub const MAX_CONSECUTIVE_STEP_FAILURES: u32 = 3;

/// The longest pause between two failing steps.
const MAX_FAILURE_BACKOFF: Duration = Duration::from_secs(1);

/// How long the engine waits with nothing to do before it starts backing the KV pool's
/// pages: gaps between requests of a steady stream are shorter.
const QUIET_BEFORE_FAULT_IN: Duration = Duration::from_millis(20);

/// What `/health` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineHealth {
    Healthy,
    /// The last `consecutive` steps failed (at least `MAX_CONSECUTIVE_STEP_FAILURES`).
    Failing {
        consecutive: u32,
    },
    /// The engine thread has ended (shut down, or died).
    Stopped,
}

/// Written by the engine thread, read by any handle.
#[derive(Default)]
struct HealthState {
    consecutive_failures: AtomicU32,
    stopped: AtomicBool,
}

/// Marks the engine stopped however its thread ends, a panic included.
struct StoppedOnDrop(Arc<HealthState>);

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
    }
}

/// A queued request: its id (for abort) and its event stream.
pub struct RequestStream {
    pub id: SeqId,
    pub events: UnboundedReceiver<RequestEvent>,
}

impl EngineHandle {
    /// Starts the engine thread. The compute pool (rayon) is the caller's to size first.
    pub fn spawn(engine: Engine) -> Self {
        let (tx, rx) = channel();
        let limits = engine.limits().clone();
        let stats = Arc::new(Mutex::new(engine.stats()));
        let shared = stats.clone();
        let health = Arc::new(HealthState::default());
        let guard = StoppedOnDrop(health.clone());
        let thread = std::thread::Builder::new()
            .name("tokenmill-engine".into())
            .spawn(move || run(engine, rx, shared, guard))
            .expect("spawning the engine thread");
        Self {
            commands: tx,
            limits,
            stats,
            health,
            thread: Arc::new(Mutex::new(Some(thread))),
        }
    }

    /// Whether the engine thread is alive and its steps are succeeding.
    pub fn health(&self) -> EngineHealth {
        if self.health.stopped.load(Ordering::SeqCst) {
            return EngineHealth::Stopped;
        }
        match self.health.consecutive_failures.load(Ordering::SeqCst) {
            n if n >= MAX_CONSECUTIVE_STEP_FAILURES => EngineHealth::Failing { consecutive: n },
            _ => EngineHealth::Healthy,
        }
    }

    pub fn limits(&self) -> &EngineLimits {
        &self.limits
    }

    /// Latest scheduler statistics (updated after every step).
    pub fn stats(&self) -> SchedulerStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Validates and queues a request. Validation happens here, synchronously, so callers
    /// can answer bad input before streaming anything; queueing waits for the engine thread
    /// only to learn the id (at most one step).
    pub fn add_request(&self, request: Request) -> Result<RequestStream> {
        let mut streams = self.add_requests(vec![request])?;
        Ok(streams.remove(0))
    }

    /// Validates and queues several requests (the choices of one API request) in one trip to
    /// the engine thread: all of them are queued, or none and the reason is returned.
    pub fn add_requests(&self, requests: Vec<Request>) -> Result<Vec<RequestStream>> {
        self.queue(requests.into_iter().map(EngineRequest::from).collect())
    }

    /// Validates and queues embedding requests (the inputs of one API request) in one trip
    /// to the engine thread, all or none, as [`add_requests`](Self::add_requests) does.
    /// Each stream ends with [`RequestEvent::Embedding`] and `Finished`.
    pub fn add_embeddings(&self, requests: Vec<EmbedRequest>) -> Result<Vec<RequestStream>> {
        self.queue(requests.into_iter().map(EngineRequest::from).collect())
    }

    fn queue(&self, requests: Vec<EngineRequest>) -> Result<Vec<RequestStream>> {
        for request in &requests {
            self.limits.validate_request(request)?;
        }
        if self.stats().num_waiting + requests.len() > self.limits.max_waiting {
            return Err(EngineError::Overloaded(self.limits.max_waiting));
        }
        let (requests, receivers): (Vec<_>, Vec<_>) = requests
            .into_iter()
            .map(|request| {
                let (events, rx) = unbounded_channel();
                ((request, events), rx)
            })
            .unzip();
        let (reply, answer) = channel();
        self.commands
            .send(Command::Add {
                requests,
                arrival: Instant::now(),
                reply,
            })
            .map_err(|_| EngineError::EngineStopped)?;
        let ids = answer.recv().map_err(|_| EngineError::EngineStopped)??;
        Ok(ids
            .into_iter()
            .zip(receivers)
            .map(|(id, events)| RequestStream { id, events })
            .collect())
    }

    /// Cancels a request; its blocks are freed before the next step.
    pub fn abort(&self, id: SeqId) {
        let _ = self.commands.send(Command::Abort(id));
    }

    /// The external hashes of every block the prefix cache can hand out by content, read
    /// between two steps (waits for at most one step): the set KV-cache events describe.
    pub fn cached_block_hashes(&self) -> Result<Vec<u64>> {
        let (reply, answer) = channel();
        self.commands
            .send(Command::CachedBlocks(reply))
            .map_err(|_| EngineError::EngineStopped)?;
        answer.recv().map_err(|_| EngineError::EngineStopped)
    }

    /// Stops the engine thread after the current step and waits for it.
    pub fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(thread) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = thread.join();
        }
    }
}

fn run(
    mut engine: Engine,
    commands: Receiver<Command>,
    stats: Arc<Mutex<SchedulerStats>>,
    stopped: StoppedOnDrop,
) {
    let health = &stopped.0;
    // Time spent backing the KV pool's pages so far; `None` once all are backed.
    let mut fault_in = Some(Duration::ZERO);
    loop {
        // Idle: wait for a command, using the quiet to back the KV pool's pages.
        if !engine.has_unfinished() {
            match next_command(&mut engine, &commands, &mut fault_in) {
                Some(cmd) => {
                    if !apply(&mut engine, cmd) {
                        return;
                    }
                }
                None => return,
            }
        }
        while let Ok(cmd) = commands.try_recv() {
            if !apply(&mut engine, cmd) {
                return;
            }
        }
        if engine.has_unfinished() {
            match guarded_step(&mut engine) {
                Ok(_) => health.consecutive_failures.store(0, Ordering::SeqCst),
                Err(why) => {
                    let failures = health.consecutive_failures.fetch_add(1, Ordering::SeqCst) + 1;
                    tracing::error!("engine step failed ({failures} in a row): {why}");
                    engine.fail_step();
                    std::thread::sleep(failure_backoff(failures));
                }
            }
        }
        if let Ok(mut s) = stats.lock() {
            *s = engine.stats();
        }
    }
}

/// The idle engine's next command (`None` once every sender is gone). After
/// [`QUIET_BEFORE_FAULT_IN`] without one, and until the pool is done (`fault_in`, the time
/// spent on it so far, becomes `None`), it backs the KV pool's pages a slice at a time,
/// looking for a command between slices, so a fresh server's first requests do not pay
/// those page faults inside their steps; a steady stream of requests never waits on it,
/// and a request after a quiet spell waits at most one slice.
fn next_command(
    engine: &mut Engine,
    commands: &Receiver<Command>,
    fault_in: &mut Option<Duration>,
) -> Option<Command> {
    let Some(spent) = fault_in else {
        return commands.recv().ok();
    };
    match commands.recv_timeout(QUIET_BEFORE_FAULT_IN) {
        Ok(cmd) => return Some(cmd),
        Err(RecvTimeoutError::Disconnected) => return None,
        Err(RecvTimeoutError::Timeout) => {}
    }
    let start = Instant::now();
    while engine.fault_in_kv() {
        match commands.try_recv() {
            Err(TryRecvError::Empty) => continue,
            next => {
                *spent += start.elapsed();
                return next.ok();
            }
        }
    }
    tracing::info!(
        "KV cache: every page backed ({:.2} s of idle time)",
        (*spent + start.elapsed()).as_secs_f64()
    );
    *fault_in = None;
    commands.recv().ok()
}

/// One step with its panics caught at the step boundary, as an error message.
fn guarded_step(engine: &mut Engine) -> std::result::Result<usize, String> {
    // The step's sequences are failed and removed right after a panic, so the state a panic
    // may have left half-updated is not used again.
    match catch_unwind(AssertUnwindSafe(|| engine.step())) {
        Ok(Ok(tokens)) => Ok(tokens),
        Ok(Err(error)) => Err(error.to_string()),
        Err(panic) => Err(panic_message(panic.as_ref())),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    format!("panicked: {text}")
}

/// 10 ms after the first failure, doubling up to `MAX_FAILURE_BACKOFF`.
fn failure_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(10);
    (Duration::from_millis(10) * (1 << doublings)).min(MAX_FAILURE_BACKOFF)
}

/// Queues every request or, if the queue lacks room or one is refused, none.
fn enqueue_all(
    engine: &mut Engine,
    requests: Vec<(EngineRequest, UnboundedSender<RequestEvent>)>,
    arrival: Instant,
) -> Result<Vec<SeqId>> {
    let max_waiting = engine.limits().max_waiting;
    if engine.stats().num_waiting + requests.len() > max_waiting {
        return Err(EngineError::Overloaded(max_waiting));
    }
    let mut ids = Vec::with_capacity(requests.len());
    for (request, events) in requests {
        match engine.enqueue(request, events, arrival) {
            Ok(id) => ids.push(id),
            Err(error) => {
                for id in ids {
                    engine.abort(id);
                }
                return Err(error);
            }
        }
    }
    Ok(ids)
}

/// Applies one command; `false` means stop.
fn apply(engine: &mut Engine, cmd: Command) -> bool {
    match cmd {
        Command::Add {
            requests,
            arrival,
            reply,
        } => {
            let _ = reply.send(enqueue_all(engine, requests, arrival));
        }
        Command::Abort(id) => engine.abort(id),
        Command::CachedBlocks(reply) => {
            let _ = reply.send(engine.cached_block_hashes());
        }
        Command::Shutdown => return false,
    }
    true
}
