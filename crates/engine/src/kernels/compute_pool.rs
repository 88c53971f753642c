//! The forward pass's fork-join pool: helpers that spin between the many short parallel
//! loops of a step instead of going to sleep, shared by every engine of the process.
//!
//! A one-row decode step runs ~150 parallel loops of a few microseconds each (one per
//! matmul and attention call). Rayon's idle workers wait in `sched_yield` and then sleep,
//! so on a 2-core VM the second thread noticed each loop late and took a third of the
//! work, not half (perf: its samples 18% matmul against the caller's 35%, attention none).
//! Here a caller publishes a loop and helpers, spinning, claim its tasks from a shared
//! counter within ~100 ns; after `SPIN_LIMIT` without work they park.
//!
//! Several callers (one engine thread per model of a server of several) may each have a
//! loop open at once, one per `Slot`. A loop carries its caller's `Priority`: a decode-only
//! step's loops are `Latency`, a step carrying prefill's `Throughput`. Every thread that
//! is free to take a task (a helper, a caller between its own tasks or waiting for its
//! loop's last ones) claims it from the open loop of highest priority that has tasks left,
//! so a decode waits for at most the task another thread is inside, not a whole prefill.
//! A `Throughput` caller is the exception: while a `Latency` loop is open it takes no task
//! and yields its core instead, since on a machine with as many helpers as spare cores its
//! thread is one too many, and the OS would otherwise share a core between it and the
//! decode's own thread (measured: docs/models.md).
//!
//! Engines go further with `step`: a decode-only step then has the whole pool while it runs
//! (a prefill step's threads block, and helpers take no prefill task), and a prefill step
//! runs in turns between decode steps (`StepGate`).
//!
//! Invariants callers rely on:
//! - tasks are claimed dynamically, so which thread runs a task never matters: callers must
//!   make each task's result independent of that (every caller here writes disjoint output);
//! - a loop started inside a task (on a helper, or on a caller inside its own or another's
//!   loop) runs serially on that thread;
//! - a panic in a task is re-raised to the loop's caller, with its payload, after the loop
//!   ends; the pool goes on working;
//! - `run` does not return before every thread has left its loop, which is what makes
//!   erasing the closure's lifetime sound (see `Slot::users`).

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::step_gate::StepGate;

/// How long an idle helper spins before it parks: longer than the gaps between a step's
/// loops and between steps, short enough not to hold a core through an idle server.
const SPIN_LIMIT: Duration = Duration::from_millis(2);

/// Loops open at once: one per engine thread of a server of several models, with room to
/// spare. A caller that finds every slot taken (tests on many threads) runs its loop alone.
const SLOTS: usize = 8;

/// Which open loop a free thread serves first: the higher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Priority {
    /// A step carrying prefill (or anything not an engine step): bound by throughput, its
    /// loops long and split into many tasks.
    #[default]
    Throughput = 0,
    /// A decode-only step: its time is its users' time per output token.
    Latency = 1,
}

thread_local! {
    /// Set on helpers and on a caller inside a loop: a nested loop runs serially.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// The priority of the loops this thread publishes.
    static PRIORITY: Cell<Priority> = const { Cell::new(Priority::Throughput) };
    /// Set inside a prefill step (`ComputePool::step`): this thread waits at the step gate.
    static GATED: Cell<bool> = const { Cell::new(false) };
}

/// The priority this thread's loops carry until the scope is dropped (then the one before).
#[must_use = "the priority lasts as long as the scope"]
pub struct PriorityScope {
    before: Priority,
}

/// Gives this thread's loops `priority` for as long as the returned scope lives.
pub fn prioritize(priority: Priority) -> PriorityScope {
    PriorityScope {
        before: PRIORITY.replace(priority),
    }
}

impl Drop for PriorityScope {
    fn drop(&mut self) {
        PRIORITY.set(self.before);
    }
}

/// One engine step on the pool, from `ComputePool::step` until dropped.
#[must_use = "the step lasts as long as the scope"]
pub struct StepScope<'a> {
    gate: &'a StepGate,
    /// When a decode step began; `None` for a prefill step.
    latency_since: Option<Instant>,
    _priority: PriorityScope,
}

impl Drop for StepScope<'_> {
    fn drop(&mut self) {
        match self.latency_since {
            Some(started) => self.gate.leave_latency(started),
            None => {
                GATED.set(false);
                self.gate.leave_throughput();
            }
        }
    }
}

/// The closure of an open loop, on its caller's stack, its lifetime erased.
struct Job {
    f: *const (dyn Fn(usize) + Sync),
}

/// Where one loop is published. Aligned to its own cache lines: other slots' claims must
/// not invalidate this one's.
#[repr(align(128))]
#[derive(Default)]
struct Slot {
    /// Held by one caller from before it publishes a loop here until every thread has left
    /// the loop.
    owned: AtomicBool,
    /// The open loop's closure, or null.
    job: AtomicPtr<Job>,
    /// Threads between announcing themselves (before they read `job`) and their last use of
    /// the loop. The caller nulls `job` and then waits for zero before its closure goes out
    /// of scope: a thread counted here either read null, or read the job while it is alive.
    users: AtomicUsize,
    /// The loop's `Priority`.
    priority: AtomicU8,
    tasks: AtomicUsize,
    /// The next task to claim; at or past `tasks` when all are claimed.
    next: AtomicUsize,
    done: AtomicUsize,
    /// The first panic among the loop's tasks, for its caller to re-raise.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

struct Helper {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

struct Shared {
    slots: [Slot; SLOTS],
    /// Open `Priority::Latency` loops: a thread inside a `Throughput` loop looks for one
    /// after each task.
    latency_open: AtomicUsize,
    /// Decode steps against prefill steps: who may compute now.
    gate: StepGate,
    /// Bumped after each loop is published, so a helper about to park sees it.
    epoch: AtomicU64,
    helpers: Vec<Helper>,
}

// SAFETY: `Job`'s pointer is the only field that is not `Sync` by itself; it is read only
// by a thread counted in its slot's `users` (see `Slot::users` and `work_in`).
unsafe impl Sync for Shared {}
// SAFETY: as above; `Shared` is only ever shared through `&'static`.
unsafe impl Send for Shared {}

pub struct ComputePool {
    shared: &'static Shared,
}

static THREADS: OnceLock<usize> = OnceLock::new();
static POOL: OnceLock<ComputePool> = OnceLock::new();

/// Sets the pool's thread count (the caller included) before its first use; later calls
/// and calls after first use change nothing.
pub fn set_threads(n: usize) {
    let _ = THREADS.set(n.max(1));
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl ComputePool {
    /// The process's pool, started on first use with `set_threads`' count or rayon's.
    pub fn global() -> &'static ComputePool {
        POOL.get_or_init(|| {
            // Without `set_threads`, rayon's count: it honours `RAYON_NUM_THREADS`, which
            // benchmarks use to time one thread.
            let n = *THREADS.get_or_init(rayon::current_num_threads);
            ComputePool::start(n)
        })
    }

    fn start(threads: usize) -> Self {
        let helpers = (1..threads)
            .map(|_| Helper {
                sleeping: AtomicBool::new(false),
                thread: OnceLock::new(),
            })
            .collect();
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            slots: Default::default(),
            latency_open: AtomicUsize::new(0),
            gate: StepGate::default(),
            epoch: AtomicU64::new(0),
            helpers,
        }));
        for i in 0..threads - 1 {
            let handle = std::thread::Builder::new()
                .name(format!("tokenmill-compute-{}", i + 1))
                .spawn(move || helper(shared, i))
                .expect("spawning a compute thread");
            let _ = shared.helpers[i].thread.set(handle.thread().clone());
        }
        Self { shared }
    }

    /// Threads that run a loop's tasks, the caller included.
    pub fn threads(&self) -> usize {
        self.shared.helpers.len() + 1
    }

    /// Begins one engine step whose loops carry `priority`, until the scope is dropped. A
    /// `Latency` step (decode only) waits out a turn given to prefill steps, then has the
    /// pool to itself; a `Throughput` step's loops wait while a `Latency` step runs.
    pub fn step(&self, priority: Priority) -> StepScope<'_> {
        let gate = &self.shared.gate;
        let latency_since = match priority {
            Priority::Latency => Some(gate.enter_latency()),
            Priority::Throughput => {
                gate.enter_throughput();
                GATED.set(true);
                None
            }
        };
        StepScope {
            gate,
            latency_since,
            _priority: prioritize(priority),
        }
    }

    /// Calls `f(t)` for every `t` in `0..tasks`, spread over the pool; returns when all
    /// have returned. A panic in a task is re-raised here after the loop ends. The loop
    /// carries this thread's priority (`prioritize`).
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks == 0 {
            return;
        }
        let s = self.shared;
        if INSIDE.get() {
            return (0..tasks).for_each(f);
        }
        if GATED.get() && s.gate.closed() {
            s.gate.wait_open();
        }
        if tasks == 1 || s.helpers.is_empty() {
            return (0..tasks).for_each(f);
        }
        let Some(mine) = s.slots.iter().position(|slot| {
            slot.owned
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
        }) else {
            return (0..tasks).for_each(f);
        };
        let slot = &s.slots[mine];
        let priority = PRIORITY.get();
        // Written before `job` is published (SeqCst, so Release) and read after it is
        // loaded (Acquire). No thread is inside this slot's previous loop any more: its
        // caller waited for `users` to drop to zero before giving the slot up.
        slot.priority.store(priority as u8, Relaxed);
        slot.tasks.store(tasks, Relaxed);
        slot.next.store(0, Relaxed);
        slot.done.store(0, Relaxed);
        let f: *const (dyn Fn(usize) + Sync + '_) = f;
        let job = Job {
            // SAFETY: only the lifetime changes. The closure outlives every use of it: it
            // is read only by threads counted in `slot.users`, and this function nulls
            // `slot.job` and waits for `users` to reach zero before it returns.
            f: unsafe {
                std::mem::transmute::<
                    *const (dyn Fn(usize) + Sync + '_),
                    *const (dyn Fn(usize) + Sync + 'static),
                >(f)
            },
        };
        INSIDE.set(true);
        if priority == Priority::Latency {
            s.latency_open.fetch_add(1, SeqCst);
        }
        slot.job.store(&job as *const Job as *mut Job, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        for h in &s.helpers {
            if h.sleeping.load(SeqCst) {
                if let Some(t) = h.thread.get() {
                    t.unpark();
                }
            }
        }
        // Our own tasks first among loops of our priority; a higher one's before them; while
        // others finish our last tasks, theirs of at least our priority (never lower: a
        // decode must not wait out a prefill's task it chose to take). A prefill's caller
        // gives its core to the decode while one of its loops is open (see the module's doc).
        let mut spins = 0;
        while slot.done.load(Acquire) < tasks {
            if GATED.get() && s.gate.closed() {
                s.gate.wait_open();
                continue;
            }
            if priority == Priority::Throughput && s.latency_open.load(Relaxed) > 0 {
                std::thread::yield_now();
                continue;
            }
            match best(s, priority, Some(mine)) {
                Some(i) if work_in(s, &s.slots[i]) > 0 => spins = 0,
                _ => backoff(&mut spins),
            }
        }
        slot.job.store(std::ptr::null_mut(), SeqCst);
        if priority == Priority::Latency {
            s.latency_open.fetch_sub(1, SeqCst);
        }
        while slot.users.load(SeqCst) != 0 {
            backoff(&mut spins);
        }
        let panic = lock(&slot.panic).take();
        slot.owned.store(false, Release);
        INSIDE.set(false);
        if let Some(payload) = panic {
            resume_unwind(payload);
        }
    }

    /// Calls `f(range)` for consecutive ranges of `per_task` indices (the last may be
    /// shorter) covering `0..len`, the ranges spread over the pool.
    pub fn for_each_range(&self, len: usize, per_task: usize, f: impl Fn(Range<usize>) + Sync) {
        let per_task = per_task.max(1);
        self.run(len.div_ceil(per_task), &|i| {
            f(i * per_task..((i + 1) * per_task).min(len))
        });
    }

    /// Calls `f(i, chunk)` for every `chunk`-long piece of `data` (the last may be
    /// shorter), the pieces spread over the pool.
    pub fn for_each_chunk_mut<T: Send>(
        &self,
        data: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let (len, chunk) = (data.len(), chunk.max(1));
        let shards = Shards::new(data);
        self.run(len.div_ceil(chunk), &|i| {
            let start = i * chunk;
            // SAFETY: task `i` alone takes `start..start + chunk`.
            f(i, unsafe { shards.range(start..(start + chunk).min(len)) });
        });
    }
}

/// A mutable slice shared by a loop's tasks, each of which takes its own disjoint ranges.
pub struct Shards<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks on other threads get disjoint `&mut` ranges of a `[T: Send]`.
unsafe impl<T: Send> Send for Shards<'_, T> {}
// SAFETY: as above; `range`'s contract keeps the ranges disjoint.
unsafe impl<T: Send> Sync for Shards<'_, T> {}

impl<'a, T> Shards<'a, T> {
    pub fn new(data: &'a mut [T]) -> Self {
        Self {
            ptr: data.as_mut_ptr(),
            len: data.len(),
            _borrow: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `data[range]`.
    ///
    /// # Safety
    /// No two ranges taken while both are alive may overlap.
    ///
    /// # Panics
    /// If `range` is not inside the slice.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, range: Range<usize>) -> &'a mut [T] {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "shard out of bounds"
        );
        // SAFETY: in bounds (asserted); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }
}

/// Waits a moment for a helper's task: spins first (a task takes microseconds), then
/// yields, so a helper the OS has descheduled (more threads than cores: tests, the server's
/// other threads) gets the core back instead of watching this thread spin.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 1 << 14 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// The slot of the open loop with tasks left that a free thread serves next: the highest
/// priority, at least `min`; among equals `prefer` where it qualifies (a caller's own loop,
/// a helper's last one), else the first. The loads are hints: `work_in` checks again.
fn best(s: &Shared, min: Priority, prefer: Option<usize>) -> Option<usize> {
    let mut best: Option<(u8, usize)> = None;
    for (i, slot) in s.slots.iter().enumerate() {
        if slot.job.load(Acquire).is_null() || slot.next.load(Relaxed) >= slot.tasks.load(Relaxed) {
            continue;
        }
        let priority = slot.priority.load(Relaxed);
        if priority < min as u8 {
            continue;
        }
        let better = match best {
            None => true,
            Some((top, _)) => priority > top || (priority == top && prefer == Some(i)),
        };
        if better {
            best = Some((priority, i));
        }
    }
    best.map(|(_, i)| i)
}

/// Claims and runs tasks of `slot`'s loop while it is open with tasks left, leaving after
/// each task if the loop is `Throughput` and a `Latency` loop is open; returns how many ran.
/// A panicking task's payload is kept for the loop's caller; the rest still run.
fn work_in(s: &Shared, slot: &Slot) -> usize {
    slot.users.fetch_add(1, SeqCst);
    let job = slot.job.load(SeqCst);
    let mut ran = 0;
    if !job.is_null() {
        let tasks = slot.tasks.load(Relaxed);
        let outranked = slot.priority.load(Relaxed) < Priority::Latency as u8;
        // SAFETY: `job` was read while this thread is counted in `users`, so its caller has
        // not passed its wait for zero users and the job and its closure are alive until
        // the `fetch_sub` below (see `Slot::users`).
        let f = unsafe { &*(*job).f };
        loop {
            let t = slot.next.fetch_add(1, Relaxed);
            if t >= tasks {
                break;
            }
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(t))) {
                lock(&slot.panic).get_or_insert(payload);
            }
            slot.done.fetch_add(1, Release);
            ran += 1;
            if outranked && (s.latency_open.load(Relaxed) > 0 || s.gate.closed()) {
                break;
            }
        }
    }
    slot.users.fetch_sub(1, SeqCst);
    ran
}

fn helper(s: &'static Shared, i: usize) {
    INSIDE.set(true);
    let me = &s.helpers[i];
    let mut last = None;
    let mut idle_since = None;
    let mut spins = 0u32;
    loop {
        // Read before looking: a loop published after this bumps it, so the check before
        // parking sees any loop this look missed.
        let seen = s.epoch.load(SeqCst);
        // While a decode step runs, its loops only: a prefill's task taken in the gap between
        // two of them would delay the next.
        let min = if s.gate.closed() {
            Priority::Latency
        } else {
            Priority::Throughput
        };
        if let Some(at) = best(s, min, last) {
            if work_in(s, &s.slots[at]) > 0 {
                last = Some(at);
                idle_since = None;
                continue;
            }
        }
        // Between a prefill's turn and the decode's next step, the decode's engine thread is
        // waking and wants a core: park at once (its first loop unparks us).
        let make_way = s.gate.awaits_decode();
        if make_way {
            s.gate.turn_over();
        }
        if !make_way {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(1024) {
                continue;
            }
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if make_way || since.elapsed() > SPIN_LIMIT {
            // Either the caller publishing a loop sees `sleeping` and unparks us, or we see
            // its epoch (both SeqCst).
            me.sleeping.store(true, SeqCst);
            if s.epoch.load(SeqCst) == seen {
                std::thread::park();
            }
            me.sleeping.store(false, SeqCst);
            idle_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_however_the_threads_share_them() {
        let pool = ComputePool::start(3);
        for tasks in [1, 2, 7, 64, 1000] {
            let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(tasks, &|t| {
                counts[t].fetch_add(1, Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Relaxed) == 1), "{tasks} tasks");
        }
    }

    #[test]
    fn chunks_cover_the_slice_and_a_nested_loop_runs_serially() {
        let pool = ComputePool::start(2);
        let mut data = vec![0usize; 1003];
        pool.for_each_chunk_mut(&mut data, 10, |i, piece| {
            let mut inner = vec![0usize; piece.len()];
            pool.for_each_chunk_mut(&mut inner, 3, |_, p| p.fill(1));
            for (x, y) in piece.iter_mut().zip(&inner) {
                *x = i + y;
            }
        });
        for (j, &x) in data.iter().enumerate() {
            assert_eq!(x, j / 10 + 1);
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_still_works() {
        let pool = ComputePool::start(2);
        for _ in 0..20 {
            let r = catch_unwind(AssertUnwindSafe(|| {
                pool.run(16, &|t| assert!(t != 5, "task five fails"));
            }));
            assert!(r.is_err());
        }
        let sum = AtomicUsize::new(0);
        pool.run(100, &|t| {
            sum.fetch_add(t, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 4950);
    }

    #[test]
    fn two_callers_at_once_both_get_every_task_run_once_with_its_own_closure() {
        let pool = ComputePool::start(3);
        std::thread::scope(|scope| {
            for (caller, priority) in [(1, Priority::Throughput), (2, Priority::Latency)] {
                let pool = &pool;
                scope.spawn(move || {
                    let _priority = prioritize(priority);
                    for round in 0..200 {
                        let tasks = 2 + (round * 7 + caller) % 61;
                        let out: Vec<AtomicUsize> =
                            (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                        pool.run(tasks, &|t| {
                            out[t].fetch_add(caller * 1000 + t, Relaxed);
                        });
                        for (t, o) in out.iter().enumerate() {
                            assert_eq!(o.load(Relaxed), caller * 1000 + t, "caller {caller}");
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn a_panic_reaches_its_own_caller_with_its_message_while_another_caller_runs() {
        let pool = ComputePool::start(3);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..50 {
                    let sum = AtomicUsize::new(0);
                    pool.run(40, &|t| {
                        sum.fetch_add(t, Relaxed);
                    });
                    assert_eq!(sum.load(Relaxed), 780);
                }
            });
            for _ in 0..50 {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    pool.run(40, &|t| assert!(t != 33, "task 33 fails"));
                }));
                let payload = r.expect_err("the panic reaches the caller");
                let message = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied());
                assert_eq!(message, Some("task 33 fails"));
            }
        });
    }

    #[test]
    fn a_prefill_steps_tasks_wait_while_a_decode_step_runs() {
        let pool = ComputePool::start(2);
        let decoding = AtomicBool::new(false);
        let decode_ended = AtomicBool::new(false);
        let ran_during_decode = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let step = pool.step(Priority::Latency);
                decoding.store(true, SeqCst);
                std::thread::sleep(Duration::from_millis(60));
                decode_ended.store(true, SeqCst);
                drop(step);
            });
            while !decoding.load(SeqCst) {
                std::thread::yield_now();
            }
            let _step = pool.step(Priority::Throughput);
            pool.run(8, &|_| {
                if !decode_ended.load(SeqCst) {
                    ran_during_decode.fetch_add(1, SeqCst);
                }
            });
        });
        assert_eq!(ran_during_decode.load(SeqCst), 0);
    }

    /// The decode's next step begins only after the prefill's turn: `TURN_SHARE` of its
    /// step's time, or sooner if the prefill step ends first. Only lower bounds are checked,
    /// so a slow machine cannot fail it.
    #[test]
    fn a_waiting_prefill_gets_a_turn_before_the_next_decode_step() {
        let pool = ComputePool::start(2);
        let clock = Instant::now();
        let decoding = AtomicBool::new(false);
        let prefill_done = Mutex::new(None::<Duration>);
        let (mut first_end, mut second_start) = (Duration::ZERO, Duration::ZERO);
        let mut first_took = Duration::ZERO;
        std::thread::scope(|scope| {
            let d = scope.spawn(|| {
                let step = pool.step(Priority::Latency);
                let began = clock.elapsed();
                decoding.store(true, SeqCst);
                std::thread::sleep(Duration::from_millis(100));
                let ended = clock.elapsed();
                drop(step);
                let _next = pool.step(Priority::Latency);
                (ended - began, ended, clock.elapsed())
            });
            while !decoding.load(SeqCst) {
                std::thread::yield_now();
            }
            {
                let _step = pool.step(Priority::Throughput);
                pool.run(4, &|_| std::thread::sleep(Duration::from_millis(1)));
            }
            *lock(&prefill_done) = Some(clock.elapsed());
            (first_took, first_end, second_start) = d.join().unwrap();
        });
        let turn = first_took.mul_f64(super::super::step_gate::TURN_SHARE);
        let prefill_done = lock(&prefill_done).expect("the prefill ran");
        assert!(
            second_start >= (first_end + turn).min(prefill_done),
            "the next decode step began {second_start:?}, before the turn ({first_end:?} + \
             {turn:?}) and before the prefill ended ({prefill_done:?})"
        );
        assert!(
            prefill_done > first_end,
            "the prefill ran during the decode step"
        );
    }

    /// The low loop's caller and both helpers are held inside the low loop's first three
    /// tasks while a latency loop of three opens; its caller takes the first and lets them
    /// go, and each helper must then claim one of the other two before any more low tasks
    /// (the low loop's caller takes none while the latency loop is open). Every latency task
    /// waits until all three have started, or a low task was claimed too early, so each
    /// thread holds one and a wrong order fails the test instead of hanging it.
    #[test]
    fn a_free_thread_claims_a_latency_loops_tasks_before_more_of_a_throughput_loop() {
        let pool = ComputePool::start(3);
        let log = Mutex::new(Vec::<(char, usize)>::new());
        let logged =
            |pick: &dyn Fn(&(char, usize)) -> bool| lock(&log).iter().filter(|e| pick(e)).count();
        let gate = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                pool.run(40, &|t| {
                    lock(&log).push(('L', t));
                    if t < 3 {
                        while !gate.load(SeqCst) {
                            std::thread::yield_now();
                        }
                    }
                });
            });
            while logged(&|_| true) < 3 {
                std::thread::yield_now();
            }
            let _latency = prioritize(Priority::Latency);
            pool.run(3, &|t| {
                lock(&log).push(('H', t));
                gate.store(true, SeqCst);
                while logged(&|e| e.0 == 'H') < 3 && logged(&|e| e.0 == 'L' && e.1 >= 3) == 0 {
                    std::thread::yield_now();
                }
            });
        });
        let log = lock(&log).clone();
        let last_h = log.iter().rposition(|e| e.0 == 'H').unwrap();
        let first_late_l = log.iter().position(|e| e.0 == 'L' && e.1 >= 3).unwrap();
        assert!(last_h < first_late_l, "claim order: {log:?}");
        let mut lows: Vec<usize> = log.iter().filter(|e| e.0 == 'L').map(|e| e.1).collect();
        lows.sort();
        assert_eq!(lows, (0..40).collect::<Vec<_>>());
    }
}
