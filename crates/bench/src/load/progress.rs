//! Run progress: an indicatif bar on a terminal, plain lines otherwise (logs, CI, pipes).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// Counts requests as they start and end, and shows the counts.
pub struct Progress {
    total: usize,
    started: AtomicUsize,
    done: AtomicUsize,
    failed: AtomicUsize,
    begun_at: Instant,
    bar: Option<ProgressBar>,
    /// Plain mode prints when `done` crosses a tenth of `total`; this is the last tenth printed.
    last_tenth: AtomicUsize,
}

impl Progress {
    pub fn new(label: &str, total: usize, allow_bar: bool) -> Self {
        let bar =
            (allow_bar && std::io::stderr().is_terminal()).then(|| terminal_bar(label, total));
        if bar.is_none() {
            eprintln!("{label}: {total} requests");
        }
        Progress {
            total,
            started: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            begun_at: Instant::now(),
            bar,
            last_tenth: AtomicUsize::new(0),
        }
    }

    pub fn request_started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.refresh();
    }

    pub fn request_finished(&self, ok: bool) {
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        match &self.bar {
            Some(_) => self.refresh(),
            None => self.maybe_print_line(done),
        }
    }

    /// Clears the bar and leaves one plain line, so the result table starts on a line of its own.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
            eprintln!(
                "{}: {} done, {} ({:.1} s)",
                bar.prefix(),
                self.done.load(Ordering::Relaxed),
                self.counts(),
                self.begun_at.elapsed().as_secs_f64()
            );
        }
    }

    /// Position and message come from one reading of the counters, so they agree.
    fn refresh(&self) {
        if let Some(bar) = &self.bar {
            let (done, message) = self.snapshot();
            bar.set_position(done as u64);
            bar.set_message(message);
        }
    }

    fn maybe_print_line(&self, done: usize) {
        let tenth = done * 10 / self.total.max(1);
        if self.last_tenth.fetch_max(tenth, Ordering::Relaxed) < tenth {
            eprintln!(
                "  {done}/{} done, {} ({:.1} s)",
                self.total,
                self.counts(),
                self.begun_at.elapsed().as_secs_f64()
            );
        }
    }

    fn counts(&self) -> String {
        self.snapshot().1
    }

    /// Requests done, and the in-flight/failed text. `done` is read before `started` so a
    /// request finishing in between can only overstate, never understate, what is in flight.
    fn snapshot(&self) -> (usize, String) {
        let done = self.done.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        let in_flight = self.started.load(Ordering::Relaxed).saturating_sub(done);
        (done, format!("{in_flight} in flight, {failed} failed"))
    }
}

fn terminal_bar(label: &str, total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    let style =
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} done, {msg}, {elapsed}")
            .expect("the template is valid")
            .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label.to_owned());
    bar
}
