//! `--spawn`: the server under test as a child process, started before and stopped after a run.

use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::args::CommonArgs;

/// Time a server gets to exit after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(10);
const HEALTH_POLL: Duration = Duration::from_millis(250);

/// A running `sh -c CMD` in its own process group, so stopping it reaches everything it started.
pub struct SpawnedServer {
    child: Child,
    group: libc::pid_t,
    stopped: bool,
}

impl SpawnedServer {
    pub fn start(command: &str, log: Option<&Path>) -> anyhow::Result<Self> {
        let mut shell = Command::new("sh");
        shell
            .arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .process_group(0);
        if let Some(path) = log {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            shell.stdout(file.try_clone()?).stderr(file);
        }
        let child = shell
            .spawn()
            .with_context(|| format!("cannot start `sh -c {command}`"))?;
        let group = child.id().context("the spawned server exited at once")? as libc::pid_t;
        Ok(SpawnedServer {
            child,
            group,
            stopped: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.group as u32
    }

    /// Polls `GET {base_url}/health` until it answers 200, the child exits, or `limit` passes.
    pub async fn wait_healthy(&mut self, base_url: &str, limit: Duration) -> anyhow::Result<()> {
        let url = format!("{}/health", base_url.trim_end_matches('/'));
        let http = reqwest::Client::builder().no_proxy().build()?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("the spawned server exited ({status}) before {url} answered");
            }
            let answer = http.get(&url).timeout(Duration::from_secs(5)).send().await;
            if answer.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "{url} did not answer 200 within {} s (--spawn-timeout)",
                    limit.as_secs()
                );
            }
            tokio::time::sleep(HEALTH_POLL).await;
        }
    }

    /// SIGTERM to the group, then SIGKILL if it lingers past the grace period.
    pub async fn stop(mut self) {
        signal_group(self.group, libc::SIGTERM);
        if tokio::time::timeout(GRACE, self.child.wait())
            .await
            .is_err()
        {
            signal_group(self.group, libc::SIGKILL);
            let _ = self.child.wait().await;
        }
        // Children of the shell that ignored SIGTERM must not outlive it.
        signal_group(self.group, libc::SIGKILL);
        self.stopped = true;
    }
}

impl Drop for SpawnedServer {
    /// Last resort when a run unwinds without `stop`: never leave a server behind.
    fn drop(&mut self) {
        if !self.stopped {
            signal_group(self.group, libc::SIGKILL);
        }
    }
}

fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory effects; a negative pid addresses the group we created.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Runs `work` with the `--spawn` server up (when given) and stops the server afterwards,
/// whether `work` succeeds, fails, or is interrupted by Ctrl-C, SIGTERM (what `timeout` and
/// service managers send) or SIGHUP (the terminal closed). A panic unwinds through
/// `SpawnedServer`'s drop, which kills the group; only SIGKILL of the benchmark itself, which
/// no process can handle, leaves the server running.
pub async fn while_serving<T>(
    args: &CommonArgs,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    if args.spawn.is_none() {
        return work.await;
    }
    while_serving_listening(args, &mut StopSignals::listen(), work).await
}

/// `while_serving` with signals listened to by the caller, for a caller that starts several
/// servers in turn: a signal that arrives between two of them is still seen by the next.
pub(crate) async fn while_serving_listening<T>(
    args: &CommonArgs,
    signals: &mut StopSignals,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let Some(command) = &args.spawn else {
        return work.await;
    };
    let mut server = SpawnedServer::start(command, args.spawn_log.as_deref())?;
    eprintln!("started server (pid {}): {command}", server.pid());
    let result = tokio::select! {
        // A signal already pending wins over a server that happens to be ready.
        biased;
        signal = signals.received() => Err(Interrupted(signal).into()),
        result = async {
            server.wait_healthy(&args.base_url, Duration::from_secs(args.spawn_timeout)).await?;
            work.await
        } => result,
    };
    server.stop().await;
    result
}

/// The error of a run stopped by a signal; callers that go on after a failed run stop here.
#[derive(Debug)]
pub struct Interrupted(pub &'static str);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by {}", self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The signals that ask the benchmark to stop, listened to from before the server starts, so
/// one that comes early still stops it. A signal whose handler cannot be installed keeps its
/// default action.
pub(crate) struct StopSignals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    hangup: Option<Signal>,
}

impl StopSignals {
    pub(crate) fn listen() -> Self {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|error| eprintln!("cannot handle {name}: {error}"))
                .ok()
        };
        Self {
            interrupt: listen(SignalKind::interrupt(), "SIGINT"),
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
            hangup: listen(SignalKind::hangup(), "SIGHUP"),
        }
    }

    /// Resolves with the name of the first signal received.
    async fn received(&mut self) -> &'static str {
        async fn on(stream: &mut Option<Signal>) {
            match stream {
                Some(stream) => {
                    stream.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = on(&mut self.interrupt) => "SIGINT",
            () = on(&mut self.terminate) => "SIGTERM",
            () = on(&mut self.hangup) => "SIGHUP",
        }
    }
}
