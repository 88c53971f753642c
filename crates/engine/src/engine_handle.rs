//! `EngineHandle`: runs the `Engine` on its own OS thread (not inside an async runtime)
//! and lets any thread add or abort requests. Each request gets its own event channel.

use crate::engine::{Engine, EngineLimits};
use crate::error::{EngineError, Result};
use crate::request::{Request, RequestEvent, SeqId};
use crate::scheduler::SchedulerStats;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

enum Command {
    Add {
        request: Request,
        events: UnboundedSender<RequestEvent>,
        arrival: Instant,
        /// Where the id (or the reason for refusal) goes.
        reply: Sender<Result<SeqId>>,
    },
    Abort(SeqId),
    Shutdown,
}

/// Cheap to clone; the engine thread stops when the last handle asks it to or drops.
#[derive(Clone)]
pub struct EngineHandle {
    commands: Sender<Command>,
    limits: EngineLimits,
    stats: Arc<Mutex<SchedulerStats>>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
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
        let thread = std::thread::Builder::new()
            .name("tokenmill-engine".into())
            .spawn(move || run(engine, rx, shared))
            .expect("spawning the engine thread");
        Self {
            commands: tx,
            limits,
            stats,
            thread: Arc::new(Mutex::new(Some(thread))),
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
        self.limits.validate(&request)?;
        if self.stats().num_waiting >= self.limits.max_waiting {
            return Err(EngineError::Overloaded(self.limits.max_waiting));
        }
        let (events, rx) = unbounded_channel();
        let (reply, answer) = channel();
        self.commands
            .send(Command::Add {
                request,
                events,
                arrival: Instant::now(),
                reply,
            })
            .map_err(|_| EngineError::EngineStopped)?;
        let id = answer.recv().map_err(|_| EngineError::EngineStopped)??;
        Ok(RequestStream { id, events: rx })
    }

    /// Cancels a request; its blocks are freed before the next step.
    pub fn abort(&self, id: SeqId) {
        let _ = self.commands.send(Command::Abort(id));
    }

    /// Stops the engine thread after the current step and waits for it.
    pub fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(thread) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = thread.join();
        }
    }
}

fn run(mut engine: Engine, commands: Receiver<Command>, stats: Arc<Mutex<SchedulerStats>>) {
    loop {
        // Idle: sleep until a command arrives instead of spinning.
        if !engine.has_unfinished() {
            match commands.recv() {
                Ok(cmd) => {
                    if !apply(&mut engine, cmd) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        while let Ok(cmd) = commands.try_recv() {
            if !apply(&mut engine, cmd) {
                return;
            }
        }
        if engine.has_unfinished() {
            if let Err(err) = engine.step() {
                tracing::error!("engine step failed: {err}");
            }
        }
        if let Ok(mut s) = stats.lock() {
            *s = engine.stats();
        }
    }
}

/// Applies one command; `false` means stop.
fn apply(engine: &mut Engine, cmd: Command) -> bool {
    match cmd {
        Command::Add {
            request,
            events,
            arrival,
            reply,
        } => {
            let _ = reply.send(engine.enqueue(request, events, arrival));
        }
        Command::Abort(id) => engine.abort(id),
        Command::Shutdown => return false,
    }
    true
}
