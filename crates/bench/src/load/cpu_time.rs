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

    /// The total covers every thread: work done by another thread shows up in it in full. (A
    /// total that only counted the calling thread, which waits in `join`, would grow by ~0.)
    #[cfg(target_os = "linux")]
    #[test]
    fn another_threads_work_counts_toward_the_process_total() {
        let before = process_cpu_time();
        let worked = std::thread::spawn(|| {
            let start = thread_cpu_time();
            let mut x = 0u64;
            while thread_cpu_time() < start + Duration::from_millis(100) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            thread_cpu_time() - start
        })
        .join()
        .unwrap();
        let grown = process_cpu_time().saturating_sub(before);
        assert!(
            grown >= worked,
            "the process total grew {grown:?} while one of its threads worked {worked:?}"
        );
    }

    /// Set in the child process that `a_sleeping_process_gains_little_cpu_time` starts.
    const ALONE: &str = "TOKENMILL_CPU_TIME_TEST_ALONE";

    /// The total is CPU time, not time passed: a process that sleeps gains almost none. (A wall
    /// clock in its place passes the test above but not this one.) The sleep runs in a child
    /// process running this test alone, as the other tests of this binary, running in parallel
    /// threads of the same process, would add their CPU time to it. Sleeping uses no CPU however
    /// busy the machine is, so a third of the interval leaves room for wake-ups and the harness.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_sleeping_process_gains_little_cpu_time() {
        let test_name = module_path!()
            .split_once("::")
            .map(|(_, path)| format!("{path}::a_sleeping_process_gains_little_cpu_time"))
            .unwrap();
        if std::env::var_os(ALONE).is_none() {
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", &test_name, "--test-threads=1", "--nocapture"])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&child.stdout);
            assert!(
                child.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&child.stderr)
            );
            assert!(
                stdout.contains("1 passed"),
                "the child ran no test: {stdout}"
            );
            return;
        }
        let slept = Duration::from_millis(300);
        let before = process_cpu_time();
        std::thread::sleep(slept);
        let grown = process_cpu_time().saturating_sub(before);
        assert!(
            grown < slept / 3,
            "the process total grew {grown:?} over a {slept:?} sleep"
        );
    }
}
