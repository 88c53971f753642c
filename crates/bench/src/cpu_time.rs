//! CPU time used by this process, to show the client is not the bottleneck.

use std::time::Duration;

/// User plus system CPU time of the whole process (all threads) so far.
pub fn process_cpu_time() -> Duration {
    // getrusage counts in microseconds, finer than /proc/self/stat's clock ticks.
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct we pass, which is large enough.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: rc == 0 means the kernel filled the struct.
    let usage = unsafe { usage.assume_init() };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec.max(0) as u64) + Duration::from_micros(tv.tv_usec.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timevals_convert_seconds_and_microseconds() {
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 500_000,
        };
        assert_eq!(timeval(tv), Duration::from_millis(2500));
    }

    /// CPU time of the calling thread alone (Linux), to compare the process total against.
    #[cfg(target_os = "linux")]
    fn thread_cpu_time() -> Duration {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: as in `process_cpu_time`.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // SAFETY: rc == 0 means the kernel filled the struct.
        let usage = unsafe { usage.assume_init() };
        timeval(usage.ru_utime) + timeval(usage.ru_stime)
    }

    /// The total covers every thread: work done by another thread shows up in it in full.
    #[cfg(target_os = "linux")]
    #[test]
    fn another_threads_work_counts_toward_the_process_total() {
        let before = process_cpu_time();
        let worked = std::thread::spawn(|| {
            let start = thread_cpu_time();
            let mut x = 0u64;
            while thread_cpu_time() < start + Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            thread_cpu_time() - start
        })
        .join()
        .unwrap();
        let after = process_cpu_time();
        assert!(
            after - before >= worked,
            "the process total grew {:?} while one of its threads worked {worked:?}",
            after - before
        );
    }
}
