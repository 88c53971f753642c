//! `ModelRegistry`: the models of a server with several, each unloaded, loading or loaded.
//! A request for an unloaded model loads it (on the blocking pool, so other models keep
//! serving) and waits; requests that come while it loads wait for the same load. A loaded
//! model is its own `AppState` (engine thread, KV pool, scheduler) and router.
//!
//! Unloading takes a model out of the table at once (its next request loads it again) and
//! stops its engine once the requests it holds have ended, which frees its weights and KV
//! pool. With `--models-max` or `--models-memory-gib`, loading one more first unloads the
//! least recently used models with no request in flight until it fits, waiting for one to
//! become idle when all are busy; with `--sleep-idle-seconds`, a model idle that long is
//! unloaded.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use tokio::sync::watch;

use crate::api::api_error::ApiError;
use crate::models::model_catalog::ModelSpec;
use crate::models::model_footprint::Footprint;
use crate::serving::app_state::AppState;
use crate::serving::drain::Drain;

/// Builds a model's state and router from its spec; runs on the blocking pool.
pub type ModelLoader =
    Arc<dyn Fn(&ModelSpec) -> anyhow::Result<(Arc<AppState>, Router)> + Send + Sync>;

/// How often a request waiting for a free slot under `--models-max` looks again.
const SLOT_POLL: Duration = Duration::from_millis(25);

/// When models are unloaded without being asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnloadPolicy {
    /// `--models-max`.
    pub max_loaded: Option<NonZeroUsize>,
    /// `--sleep-idle-seconds`.
    pub idle_after: Option<Duration>,
    /// `--models-memory-gib`, in bytes: what the models held (loaded or loading) may be
    /// counted as holding together (`Footprint`).
    pub memory_budget: Option<u64>,
}

/// A loaded model.
pub struct Resident {
    pub state: Arc<AppState>,
    pub router: Router,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
}

impl Resident {
    fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::SeqCst) == 0).then(|| *lock(&self.last_used))
    }

    /// Stops the engine thread (which owns the weights and the KV pool). Blocking.
    fn stop(&self) {
        self.state.handle.shutdown();
    }
}

/// One request's hold on a loaded model: while any is held, the model is not unloaded.
pub struct Lease {
    pub resident: Arc<Resident>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        *lock(&self.resident.last_used) = Instant::now();
        self.resident.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Where a load ends: the model, or why it failed.
type LoadOutcome = Option<Result<Arc<Resident>, String>>;

enum Slot {
    Unloaded,
    Loading(watch::Receiver<LoadOutcome>),
    Loaded(Arc<Resident>),
}

struct Entry {
    spec: ModelSpec,
    footprint: Footprint,
    slot: Slot,
}

/// A model as `/v1/models` lists it.
#[derive(Debug, Clone)]
pub struct ModelStatus {
    pub name: String,
    pub source: String,
    /// `loaded`, `loading` or `unloaded`.
    pub state: &'static str,
    /// Known once loaded.
    pub max_model_len: Option<usize>,
}

pub struct ModelRegistry {
    entries: Mutex<Vec<Entry>>,
    loader: ModelLoader,
    policy: UnloadPolicy,
    /// Every forwarded request, for the shutdown's drain.
    pub drain: Drain,
    /// Unix seconds when the server started.
    pub created: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl ModelRegistry {
    /// `models`: each model and the memory it is counted as holding once loaded.
    pub fn new(
        models: Vec<(ModelSpec, Footprint)>,
        loader: ModelLoader,
        policy: UnloadPolicy,
    ) -> Arc<Self> {
        let entries = models
            .into_iter()
            .map(|(spec, footprint)| Entry {
                spec,
                footprint,
                slot: Slot::Unloaded,
            })
            .collect();
        Arc::new(Self {
            entries: Mutex::new(entries),
            loader,
            policy,
            drain: Drain::default(),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        })
    }

    /// The model a request without `model` goes to: the first one named.
    pub fn default_name(&self) -> Option<String> {
        lock(&self.entries).first().map(|e| e.spec.name.clone())
    }

    pub fn names(&self) -> Vec<String> {
        lock(&self.entries)
            .iter()
            .map(|e| e.spec.name.clone())
            .collect()
    }

    pub fn statuses(&self) -> Vec<ModelStatus> {
        lock(&self.entries)
            .iter()
            .map(|e| {
                let (state, max_model_len) = match &e.slot {
                    Slot::Unloaded => ("unloaded", None),
                    Slot::Loading(_) => ("loading", None),
                    Slot::Loaded(r) => ("loaded", Some(r.state.handle.limits().max_model_len)),
                };
                ModelStatus {
                    name: e.spec.name.clone(),
                    source: e.spec.source.clone(),
                    state,
                    max_model_len,
                }
            })
            .collect()
    }

    /// Every loaded model.
    pub fn loaded(&self) -> Vec<Arc<Resident>> {
        lock(&self.entries)
            .iter()
            .filter_map(|e| match &e.slot {
                Slot::Loaded(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    fn not_found(&self, entries: &[Entry], name: &str) -> ApiError {
        let served: Vec<&str> = entries.iter().map(|e| e.spec.name.as_str()).collect();
        ApiError::model_not_found(name, &served.join("`, `"))
    }

    /// A hold on `name`, loaded first if it is not: 404 for a name not served, 500 when the
    /// model cannot be loaded, 503 when it alone is over `--models-memory-gib`.
    pub async fn acquire(self: &Arc<Self>, name: &str) -> Result<Lease, ApiError> {
        loop {
            // Decided under the lock; awaited after it is released.
            let next = {
                let mut entries = lock(&self.entries);
                let Some(at) = entries.iter().position(|e| e.spec.name == name) else {
                    return Err(self.not_found(&entries, name));
                };
                match &entries[at].slot {
                    Slot::Loaded(resident) => {
                        resident.in_flight.fetch_add(1, Ordering::SeqCst);
                        *lock(&resident.last_used) = Instant::now();
                        return Ok(Lease {
                            resident: resident.clone(),
                        });
                    }
                    Slot::Loading(outcome) => Some(outcome.clone()),
                    Slot::Unloaded => self
                        .make_room(&mut entries, at)?
                        .map(|evicted| self.start_load(&mut entries, at, evicted)),
                }
            };
            let Some(mut loading) = next else {
                tokio::time::sleep(SLOT_POLL).await;
                continue;
            };
            let outcome = loading
                .wait_for(Option::is_some)
                .await
                .map(|o| o.clone())
                .ok()
                .flatten();
            match outcome {
                // Taken under the lock on the next turn: it may have been unloaded since.
                Some(Ok(_)) => continue,
                Some(Err(why)) => return Err(ApiError::model_load_failed(name, &why)),
                None => return Err(ApiError::model_load_failed(name, "its load was abandoned")),
            }
        }
    }

    /// Under `--models-max` and `--models-memory-gib`, takes the least recently used idle
    /// models out until one more fits (returned, to be stopped before the new one loads);
    /// `None` when every loaded model that could make room is busy; a 503 when `wanted`
    /// alone is over the memory budget (the server's configuration, not the request's).
    fn make_room(
        &self,
        entries: &mut [Entry],
        wanted: usize,
    ) -> Result<Option<Vec<Arc<Resident>>>, ApiError> {
        let need = entries[wanted].footprint;
        if let Some(budget) = self.policy.memory_budget {
            if need.bytes() > budget {
                return Err(ApiError::over_memory_budget(
                    &entries[wanted].spec.name,
                    &need.to_string(),
                    budget,
                ));
            }
        }
        let mut evicted = Vec::new();
        loop {
            let held = || entries.iter().filter(|e| !matches!(e.slot, Slot::Unloaded));
            let too_many = self
                .policy
                .max_loaded
                .is_some_and(|max| held().count() >= max.get());
            let held_bytes: u64 = held().map(|e| e.footprint.bytes()).sum();
            let too_big = self
                .policy
                .memory_budget
                .is_some_and(|budget| held_bytes + need.bytes() > budget);
            if !too_many && !too_big {
                return Ok(Some(evicted));
            }
            let oldest = entries
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != wanted)
                .filter_map(|(i, e)| match &e.slot {
                    Slot::Loaded(r) => r.idle_since().map(|since| (since, i)),
                    _ => None,
                })
                .min();
            let Some((_, victim)) = oldest else {
                // Nothing freed yet: put back what was taken, to be stopped later.
                for resident in evicted {
                    self.retire(resident);
                }
                return Ok(None);
            };
            let why = if too_many {
                "--models-max"
            } else {
                "--models-memory-gib"
            };
            tracing::info!(
                "unloading {} to make room for {} ({why})",
                entries[victim].spec.name,
                entries[wanted].spec.name,
            );
            if let Slot::Loaded(r) = std::mem::replace(&mut entries[victim].slot, Slot::Unloaded) {
                evicted.push(r);
            }
        }
    }

    /// Marks `entries[at]` loading and loads it on the blocking pool, after stopping the
    /// models it evicted (so their memory is free first).
    fn start_load(
        self: &Arc<Self>,
        entries: &mut [Entry],
        at: usize,
        evicted: Vec<Arc<Resident>>,
    ) -> watch::Receiver<LoadOutcome> {
        let (done, outcome) = watch::channel(None);
        entries[at].slot = Slot::Loading(outcome.clone());
        let spec = entries[at].spec.clone();
        let registry = self.clone();
        tokio::spawn(async move {
            let loader = registry.loader.clone();
            let load_spec = spec.clone();
            let started = Instant::now();
            tracing::info!("loading {} from {}", spec.name, spec.source);
            let loaded = tokio::task::spawn_blocking(move || {
                if !evicted.is_empty() {
                    for resident in &evicted {
                        resident.stop();
                    }
                    drop(evicted);
                    give_back_freed_memory();
                }
                loader(&load_spec)
            })
            .await;
            let result = match loaded {
                Ok(Ok((state, router))) => Ok(Arc::new(Resident {
                    state,
                    router,
                    in_flight: AtomicUsize::new(0),
                    last_used: Mutex::new(Instant::now()),
                })),
                Ok(Err(error)) => Err(format!("{error:#}")),
                Err(join) => Err(format!("loading it panicked: {join}")),
            };
            match &result {
                Ok(_) => tracing::info!("loaded {} in {:.1?}", spec.name, started.elapsed()),
                Err(why) => tracing::error!("cannot load {}: {why}", spec.name),
            }
            {
                let mut entries = lock(&registry.entries);
                if let Some(entry) = entries.iter_mut().find(|e| e.spec.name == spec.name) {
                    entry.slot = match &result {
                        Ok(resident) => Slot::Loaded(resident.clone()),
                        // Unloaded again: a later request tries anew (the file may be fixed).
                        Err(_) => Slot::Unloaded,
                    };
                }
            }
            done.send_replace(Some(result));
        });
        outcome
    }

    /// Loads `name` if it is not loaded (`POST /models/load`).
    pub async fn load(self: &Arc<Self>, name: &str) -> Result<(), ApiError> {
        self.acquire(name).await.map(drop)
    }

    /// Takes `name` out of the table and stops its engine once its requests have ended
    /// (`POST /models/unload`); returns when it has stopped. A 400 when it is not loaded.
    pub async fn unload(&self, name: &str) -> Result<(), ApiError> {
        let resident = {
            let mut entries = lock(&self.entries);
            let Some(entry) = entries.iter_mut().find(|e| e.spec.name == name) else {
                return Err(self.not_found(&entries, name));
            };
            match std::mem::replace(&mut entry.slot, Slot::Unloaded) {
                Slot::Loaded(resident) => resident,
                other => {
                    entry.slot = other;
                    return Err(ApiError::bad_request(format!(
                        "the model `{name}` is not loaded"
                    )));
                }
            }
        };
        tracing::info!("unloading {name}");
        stop_when_idle(resident).await;
        Ok(())
    }

    /// Stops `resident` in the background once its requests have ended.
    fn retire(&self, resident: Arc<Resident>) {
        tokio::spawn(stop_when_idle(resident));
    }

    /// Unloads every model idle for `--sleep-idle-seconds`; runs until the server stops.
    pub async fn unload_idle_models(self: Arc<Self>) {
        let Some(after) = self.policy.idle_after else {
            return;
        };
        let every = (after / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            tokio::time::sleep(every).await;
            let idle: Vec<(String, Arc<Resident>)> = {
                let mut entries = lock(&self.entries);
                entries
                    .iter_mut()
                    .filter(|e| match &e.slot {
                        Slot::Loaded(r) => r.idle_since().is_some_and(|t| t.elapsed() >= after),
                        _ => false,
                    })
                    .filter_map(|e| match std::mem::replace(&mut e.slot, Slot::Unloaded) {
                        Slot::Loaded(r) => Some((e.spec.name.clone(), r)),
                        _ => None,
                    })
                    .collect()
            };
            for (name, resident) in idle {
                tracing::info!("unloading {name}: idle for {after:?} (--sleep-idle-seconds)");
                self.retire(resident);
            }
        }
    }

    /// Ends every open reply of every loaded model (the drain limit is about to run out).
    pub fn close_replies(&self) {
        for resident in self.loaded() {
            resident.state.close_replies();
        }
    }

    /// Stops every loaded model's engine (the server is exiting). Blocking.
    pub fn stop_all(&self) {
        for resident in self.loaded() {
            resident.stop();
        }
    }
}

/// Waits until no request holds `resident`, then stops its engine on the blocking pool.
async fn stop_when_idle(resident: Arc<Resident>) {
    while resident.in_flight.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(SLOT_POLL).await;
    }
    let _ = tokio::task::spawn_blocking(move || {
        resident.stop();
        drop(resident);
        give_back_freed_memory();
    })
    .await;
}

/// Returns the heap a stopped model freed to the OS. glibc keeps freed memory in its
/// per-thread arenas for reuse: measured on the default model, about 300 MiB of loading
/// buffers and tokenizer stayed resident after its engine stopped until trimmed.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
