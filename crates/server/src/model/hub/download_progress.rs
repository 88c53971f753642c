//! A download's progress: a bar on a terminal, log lines otherwise (a service's log should
//! not fill with redrawn bars): for a large file each tenth or every few seconds, whichever
//! comes first; for a small one only that it arrived.

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Longest wait between two log lines of one download.
const LOG_EVERY: Duration = Duration::from_secs(5);
/// Files smaller than this get one log line, when they arrive.
const LOG_PROGRESS_FROM: u64 = 1 << 20;

/// Reports one file's download, through `hf_hub`'s `Progress` hooks.
pub enum DownloadProgress {
    Bar(ProgressBar),
    Log(LogProgress),
}

/// The state log lines need.
pub struct LogProgress {
    file: String,
    total: u64,
    done: u64,
    /// The tenth last logged, and when.
    logged_tenth: u64,
    logged_at: Instant,
    started: bool,
}

impl DownloadProgress {
    /// A bar where stderr is a terminal and bars are not disabled, else log lines.
    pub fn new(file: &str, bars: bool) -> Self {
        if bars && std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec} ({eta})",
            ) {
                bar.set_style(style);
            }
            bar.set_message(file.to_owned());
            DownloadProgress::Bar(bar)
        } else {
            DownloadProgress::Log(LogProgress {
                file: file.to_owned(),
                total: 0,
                done: 0,
                logged_tenth: 0,
                logged_at: Instant::now(),
                started: false,
            })
        }
    }
}

/// Borrowed, so one report spans every try of a file.
impl hf_hub::api::Progress for &mut DownloadProgress {
    // The client calls `init` again when it resumes, then `update` with the bytes already
    // there, so both keep the count absolute.
    fn init(&mut self, size: usize, _filename: &str) {
        match &mut **self {
            DownloadProgress::Bar(bar) => {
                bar.set_length(size as u64);
                bar.set_position(0);
            }
            DownloadProgress::Log(log) => {
                log.total = size as u64;
                log.done = 0;
                if !log.started && log.total >= LOG_PROGRESS_FROM {
                    log.started = true;
                    log.logged_at = Instant::now();
                    tracing::info!("downloading {} ({})", log.file, HumanBytes(log.total));
                }
            }
        }
    }

    fn update(&mut self, size: usize) {
        match &mut **self {
            DownloadProgress::Bar(bar) => bar.inc(size as u64),
            DownloadProgress::Log(log) => {
                log.done += size as u64;
                if log.total < LOG_PROGRESS_FROM || log.done >= log.total {
                    return;
                }
                let tenth = log.done * 10 / log.total;
                if tenth > log.logged_tenth || log.logged_at.elapsed() >= LOG_EVERY {
                    log.logged_tenth = tenth;
                    log.logged_at = Instant::now();
                    tracing::info!(
                        "{}: {}% ({} of {})",
                        log.file,
                        log.done * 100 / log.total,
                        HumanBytes(log.done),
                        HumanBytes(log.total)
                    );
                }
            }
        }
    }

    fn finish(&mut self) {
        match &mut **self {
            DownloadProgress::Bar(bar) => bar.finish(),
            DownloadProgress::Log(log) => {
                tracing::info!("downloaded {} ({})", log.file, HumanBytes(log.total))
            }
        }
    }
}
