//! `MaskWorker`: one background thread that computes each constrained sequence's next token
//! mask while the next forward pass runs, so a mask costs the step nothing when the compute
//! threads leave the CPU idle (a one-sequence decode waits on memory, not on both cores).

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

pub struct MaskWorker {
    jobs: Mutex<Sender<Job>>,
}

impl MaskWorker {
    /// The process's worker, started on first use; `None` if no thread could be started
    /// (callers then compute masks inline, as before).
    pub fn get() -> Option<&'static MaskWorker> {
        static WORKER: OnceLock<Option<MaskWorker>> = OnceLock::new();
        WORKER.get_or_init(Self::start).as_ref()
    }

    fn start() -> Option<MaskWorker> {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("tokenmill-mask".into())
            .spawn(move || {
                for job in rx {
                    // A panicking job loses only its own result (its waiter sees the
                    // channel close); the thread goes on with the next.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .ok()?;
        Some(MaskWorker {
            jobs: Mutex::new(tx),
        })
    }

    /// Runs `job` on the worker thread, in submission order. Gives the job back if the
    /// thread is gone, so the caller can run it itself.
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.send(job).map_err(|e| e.0)
    }
}
