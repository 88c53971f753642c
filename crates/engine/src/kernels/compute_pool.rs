//! The forward pass's fork-join pool: helpers that spin between the many short parallel
//! loops of a step instead of going to sleep.
//!
//! A one-row decode step runs ~150 parallel loops of a few microseconds each (one per
//! matmul and attention call). Rayon's idle workers wait in `sched_yield` and then sleep,
//! so on a 2-core VM the second thread noticed each loop late and took a third of the
//! work, not half (perf: its samples 18% matmul against the caller's 35%, attention none).
//! Here the caller publishes a loop and helpers, spinning on one atomic word, claim its
//! tasks from a shared counter within ~100 ns; after `SPIN_LIMIT` without work they park.
//!
//! Tasks are claimed dynamically, so which thread runs a task never matters: callers must
//! make each task's result independent of that (every caller here writes disjoint output).

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle helper spins before it parks: longer than the gaps between a step's
/// loops and between steps, short enough not to hold a core through an idle server.
const SPIN_LIMIT: Duration = Duration::from_millis(2);

/// One published loop: `tasks` calls of `f`, with the lifetime erased (the caller does not
/// return before every helper has left it).
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    tasks: usize,
}

struct Helper {
    /// The word of the loop this helper is inside, or 0.
    busy: AtomicU64,
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

struct Shared {
    /// `epoch << 1 | closed`: a new epoch publishes a loop, the closed bit ends it.
    word: AtomicU64,
    job: UnsafeCell<Job>,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
    helpers: Vec<Helper>,
}

// SAFETY: `job` is written only by the caller holding `submit`, while no helper is inside a
// loop (every `busy` is clear or stale), and read by helpers only inside one (see `helper`).
unsafe impl Sync for Shared {}

pub struct ComputePool {
    shared: &'static Shared,
    /// One caller at a time; others (tests on several threads) run their loops alone.
    submit: Mutex<()>,
}

thread_local! {
    /// Set on helpers and on a caller inside a loop: a nested loop runs serially.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

static THREADS: OnceLock<usize> = OnceLock::new();
static POOL: OnceLock<ComputePool> = OnceLock::new();

/// Sets the pool's thread count (the caller included) before its first use; later calls
/// and calls after first use change nothing.
pub fn set_threads(n: usize) {
    let _ = THREADS.set(n.max(1));
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
                busy: AtomicU64::new(0),
                sleeping: AtomicBool::new(false),
                thread: OnceLock::new(),
            })
            .collect();
        let noop: &'static (dyn Fn(usize) + Sync) = &|_| {};
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            word: AtomicU64::new(0),
            job: UnsafeCell::new(Job { f: noop, tasks: 0 }),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            helpers,
        }));
        for i in 0..threads - 1 {
            let handle = std::thread::Builder::new()
                .name(format!("tokenmill-compute-{}", i + 1))
                .spawn(move || helper(shared, i))
                .expect("spawning a compute thread");
            let _ = shared.helpers[i].thread.set(handle.thread().clone());
        }
        Self {
            shared,
            submit: Mutex::new(()),
        }
    }

    /// Threads that run a loop's tasks, the caller included.
    pub fn threads(&self) -> usize {
        self.shared.helpers.len() + 1
    }

    /// Calls `f(t)` for every `t` in `0..tasks`, spread over the pool; returns when all
    /// have returned. A panic in a task is re-raised here after the loop ends.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks == 0 {
            return;
        }
        let serial = tasks == 1 || self.shared.helpers.is_empty() || INSIDE.get();
        let guard = if serial {
            None
        } else {
            self.submit.try_lock().ok()
        };
        let Some(_guard) = guard else {
            return (0..tasks).for_each(f);
        };
        INSIDE.set(true);
        let s = self.shared;
        // SAFETY: we hold `submit` and the previous loop's caller waited for every helper
        // to leave it, so no helper reads `job` now. The lifetime is erased; this function
        // does not return before every helper has left this loop.
        unsafe {
            let f: *const (dyn Fn(usize) + Sync + '_) = f;
            *s.job.get() = Job {
                f: std::mem::transmute::<
                    *const (dyn Fn(usize) + Sync + '_),
                    *const (dyn Fn(usize) + Sync + 'static),
                >(f),
                tasks,
            };
        }
        s.next.store(0, Relaxed);
        s.done.store(0, Relaxed);
        let word = ((s.word.load(Relaxed) >> 1) + 1) << 1;
        s.word.store(word, SeqCst);
        for h in &s.helpers {
            if h.sleeping.load(SeqCst) {
                if let Some(t) = h.thread.get() {
                    t.unpark();
                }
            }
        }
        let ours = claim(s, f, tasks);
        let mut spins = 0;
        while s.done.load(Acquire) < tasks {
            backoff(&mut spins);
        }
        s.word.store(word | 1, SeqCst);
        for h in &s.helpers {
            while h.busy.load(SeqCst) == word {
                backoff(&mut spins);
            }
        }
        INSIDE.set(false);
        let theirs = s.panicked.swap(false, Relaxed);
        if let Some(payload) = ours {
            resume_unwind(payload);
        }
        assert!(!theirs, "a compute-pool task panicked on a helper thread");
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

/// Claims and runs tasks until none are left, counting each as done; returns the first
/// panic among them (the rest still run).
fn claim(
    s: &Shared,
    f: &(dyn Fn(usize) + Sync),
    tasks: usize,
) -> Option<Box<dyn std::any::Any + Send>> {
    let mut first = None;
    loop {
        let t = s.next.fetch_add(1, Relaxed);
        if t >= tasks {
            return first;
        }
        let result = catch_unwind(AssertUnwindSafe(|| f(t)));
        s.done.fetch_add(1, Release);
        if let Err(payload) = result {
            first.get_or_insert(payload);
        }
    }
}

fn helper(s: &'static Shared, i: usize) {
    INSIDE.set(true);
    let me = &s.helpers[i];
    let mut seen = s.word.load(Acquire);
    loop {
        let word = wait_for_change(s, me, seen);
        seen = word;
        if word & 1 == 1 {
            continue;
        }
        // Announce, then re-check: either the caller sees `busy` and waits for us, or we
        // see that it already closed this loop (both SeqCst).
        me.busy.store(word, SeqCst);
        if s.word.load(SeqCst) == word {
            // SAFETY: the loop is open and its caller waits for `busy` to clear.
            let job = unsafe { *s.job.get() };
            // SAFETY: as above: `f` outlives our use of it.
            if claim(s, unsafe { &*job.f }, job.tasks).is_some() {
                s.panicked.store(true, Relaxed);
            }
        }
        me.busy.store(0, SeqCst);
    }
}

/// Spins until the word differs from `seen`, parking after `SPIN_LIMIT` without change.
fn wait_for_change(s: &Shared, me: &Helper, seen: u64) -> u64 {
    let mut since = Instant::now();
    let mut spins = 0u32;
    loop {
        let word = s.word.load(Acquire);
        if word != seen {
            return word;
        }
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) && since.elapsed() > SPIN_LIMIT {
            me.sleeping.store(true, SeqCst);
            if s.word.load(SeqCst) == seen {
                std::thread::park();
            }
            me.sleeping.store(false, SeqCst);
            since = Instant::now();
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
}
