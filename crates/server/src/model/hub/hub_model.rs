//! A Hub model made local: asked of the Hub (which commit the revision is at, which files
//! make the model), fetched where the cache lacks them, or found in the cache alone when
//! offline or when the Hub cannot be reached.

use super::hub_cache::HubCache;
use super::hub_client::{HubClient, RepoListing};
use super::hub_error::HubError;
use super::hub_settings::HubSettings;
use super::model_files::ModelFiles;
use super::model_reference::ModelReference;
use anyhow::{anyhow, bail};
use std::path::PathBuf;

/// A model in the cache, ready to load.
#[derive(Debug, Clone)]
pub struct HubModel {
    /// The GGUF file, or the snapshot folder of a safetensors checkpoint.
    pub path: PathBuf,
    pub commit: String,
}

impl HubModel {
    /// `reference` at `revision` from the cache, fetching what it lacks unless offline.
    pub fn resolve(
        reference: &ModelReference,
        revision: &str,
        settings: &HubSettings,
    ) -> anyhow::Result<Self> {
        let cache = HubCache::new(settings.cache_dir.clone());
        let cache_dir = cache.root().display().to_string();
        if settings.offline {
            return from_cache(reference, revision, &cache)?.ok_or_else(|| {
                anyhow!(
                    "HF_HUB_OFFLINE is set and the Hugging Face cache {cache_dir} has no copy \
                     of {reference} at revision {revision}: fetch it once with the network on"
                )
            });
        }
        let client = HubClient::new(settings, cache.clone()).map_err(|e| {
            anyhow!(
                "{reference}: cannot set up the Hub client for {}: {e}",
                settings.endpoint
            )
        })?;
        let listing = match client.listing(&reference.repo_id, revision) {
            Ok(listing) => listing,
            Err(error) if error.is_unreachable() => {
                let cached = from_cache(reference, revision, &cache)?;
                let Some(model) = cached else {
                    bail!(
                        "cannot reach the Hugging Face Hub at {} for {reference} ({error}), and \
                         the cache {cache_dir} has no copy of it at revision {revision}",
                        settings.endpoint
                    );
                };
                tracing::warn!(
                    "cannot reach the Hugging Face Hub at {} ({error}): serving {reference} \
                     from the cache (commit {})",
                    settings.endpoint,
                    model.commit
                );
                return Ok(model);
            }
            Err(HubError::Status(code)) => bail!(
                "the Hugging Face Hub at {} has no model {} at revision {revision} (HTTP {code}{})",
                settings.endpoint,
                reference.repo_id,
                if matches!(code, 401 | 403) {
                    ": it may be private or gated; set HF_TOKEN or log in with `hf auth login`"
                } else {
                    ""
                }
            ),
            Err(error) => bail!("{reference}: {error}"),
        };
        fetch(reference, revision, &listing, &client, &cache)
    }
}

/// The files `reference` needs at the listing's commit, each fetched unless in the cache.
fn fetch(
    reference: &ModelReference,
    revision: &str,
    listing: &RepoListing,
    client: &HubClient,
    cache: &HubCache,
) -> anyhow::Result<HubModel> {
    let repo = &reference.repo_id;
    let commit = &listing.commit;
    let chosen = ModelFiles::choose(&reference.selector, &listing.files)
        .map_err(|why| anyhow!("{reference} at revision {revision}: {why}"))?;
    let mut fetched = 0;
    let mut get = |file: &str| -> anyhow::Result<PathBuf> {
        if let Some(path) = cache.snapshot_file(repo, commit, file) {
            return Ok(path);
        }
        if fetched == 0 {
            tracing::info!(
                "fetching {reference} (commit {commit}) into the Hugging Face cache {}",
                cache.root().display()
            );
        }
        fetched += 1;
        client
            .fetch(repo, commit, file)
            .map_err(|error| match error {
                HubError::Corrupt(why) => anyhow!("{why}"),
                other => anyhow!(
                    "cannot fetch {file} of {repo} (commit {commit}) into the cache {}: {other}",
                    cache.root().display()
                ),
            })
    };
    let path = match &chosen {
        ModelFiles::Gguf(file) => get(file)?,
        ModelFiles::Safetensors { files, indexed } => {
            let mut last = None;
            for file in files {
                last = Some(get(file)?);
            }
            if *indexed {
                let index = last.ok_or_else(|| anyhow!("{reference}: no shard index"))?;
                for shard in shards(&index)? {
                    get(&shard)?;
                }
            }
            cache.snapshot_dir(repo, commit)
        }
    };
    write_ref(cache, repo, revision, commit)?;
    if fetched == 0 {
        tracing::info!(
            "{reference} (commit {commit}) is in the Hugging Face cache {}",
            cache.root().display()
        );
    }
    Ok(HubModel {
        path,
        commit: commit.clone(),
    })
}

/// The model as the cache holds it at `revision`, if whole; an error only for a cache that
/// cannot be read as one.
fn from_cache(
    reference: &ModelReference,
    revision: &str,
    cache: &HubCache,
) -> anyhow::Result<Option<HubModel>> {
    let repo = &reference.repo_id;
    let Some(commit) = cache.commit_of(repo, revision) else {
        return Ok(None);
    };
    let files = cache.snapshot_files(repo, &commit);
    let Ok(chosen) = ModelFiles::choose(&reference.selector, &files) else {
        return Ok(None);
    };
    let path = match chosen {
        ModelFiles::Gguf(file) => cache.snapshot_dir(repo, &commit).join(file),
        ModelFiles::Safetensors { files, indexed } => {
            let dir = cache.snapshot_dir(repo, &commit);
            if indexed {
                let index = dir.join(files.last().map(String::as_str).unwrap_or_default());
                let all_there = shards(&index)?
                    .iter()
                    .all(|shard| cache.snapshot_file(repo, &commit, shard).is_some());
                if !all_there {
                    return Ok(None);
                }
            }
            dir
        }
    };
    Ok(Some(HubModel { path, commit }))
}

fn shards(index: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(index)
        .map_err(|e| anyhow!("cannot read {}: {e}", index.display()))?;
    ModelFiles::shards_of_index(&text).map_err(|why| anyhow!("{}: {why}", index.display()))
}

/// `refs/<revision>` holds the commit a branch or tag was last seen at, so offline runs find
/// it; a revision that is the commit needs none.
fn write_ref(cache: &HubCache, repo: &str, revision: &str, commit: &str) -> anyhow::Result<()> {
    if revision == commit {
        return Ok(());
    }
    let path = cache.repo_dir(repo).join("refs").join(revision);
    let write = || -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, commit)
    };
    write().map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}
