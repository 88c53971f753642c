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
    fn busy_work_increases_cpu_time() {
        let before = process_cpu_time();
        let mut x = 0u64;
        while process_cpu_time() < before + Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(process_cpu_time() >= before + Duration::from_millis(20));
    }
}
