//! The Hub over HTTP, through the `hf-hub` crate's blocking client, with what tokenmill adds
//! around it: retries that resume a cut transfer (each download call resumes the crate's
//! `.part` file with `Range`; the crate's own retry loop is left off, as it can resume from
//! the wrong offset and drops a last try that succeeded), the sha256 of LFS files checked
//! before a file is used (the crate checks none: a bad file is taken out of the cache and
//! refused), and the refs laid out as `huggingface_hub` lays them.

use super::download_progress::DownloadProgress;
use super::hub_cache::HubCache;
use super::hub_error::HubError;
use super::hub_settings::HubSettings;
use hf_hub::api::sync::{Api, ApiBuilder};
use hf_hub::{Cache, Repo, RepoType};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Tries of one file, each resuming where the last stopped.
const DOWNLOAD_TRIES: u32 = 6;
/// The pause before the second try; each later one waits this much longer.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// A repository at one revision, as the Hub's API describes it.
#[derive(Debug, Clone)]
pub struct RepoListing {
    /// The commit the revision is at.
    pub commit: String,
    /// Every file, as a path in the repository.
    pub files: Vec<String>,
}

pub struct HubClient {
    api: Api,
    cache: HubCache,
    bars: bool,
}

impl HubClient {
    pub fn new(settings: &HubSettings, cache: HubCache) -> Result<Self, HubError> {
        let api = ApiBuilder::from_cache(Cache::new(settings.cache_dir.clone()))
            .with_endpoint(settings.endpoint.clone())
            .with_token(settings.token.clone())
            .with_progress(false)
            .with_retries(0)
            .with_user_agent("tokenmill", env!("CARGO_PKG_VERSION"))
            .build()?;
        Ok(Self {
            api,
            cache,
            bars: !settings.no_progress_bars,
        })
    }

    /// `GET /api/models/{repo}/revision/{revision}`: the commit and the file list.
    pub fn listing(&self, repo_id: &str, revision: &str) -> Result<RepoListing, HubError> {
        let info = self.repo(repo_id, revision).info()?;
        Ok(RepoListing {
            commit: info.sha,
            files: info.siblings.into_iter().map(|s| s.rfilename).collect(),
        })
    }

    /// Fetches `file` of the repository at `commit` into the cache (its blob, the snapshot's
    /// link) and returns the link, its checksum checked where the Hub gives one.
    pub fn fetch(&self, repo_id: &str, commit: &str, file: &str) -> Result<PathBuf, HubError> {
        let mut progress = DownloadProgress::new(file, self.bars);
        let mut tries = 1;
        let fetched = loop {
            // At the commit, not the branch, so every file comes from the same one.
            let fetched = self
                .repo(repo_id, commit)
                .download_with_progress(file, &mut progress)
                .map_err(HubError::from);
            match fetched {
                Err(error) if error.is_unreachable() && tries < DOWNLOAD_TRIES => {
                    tracing::warn!(
                        "{file}: {error}; resuming (try {} of {DOWNLOAD_TRIES})",
                        tries + 1
                    );
                    std::thread::sleep(RETRY_PAUSE * tries);
                    tries += 1;
                }
                other => break other,
            }
        };
        self.cache.remove_commit_ref(repo_id, commit);
        let link = fetched?;
        if let Err(error) = verify(&link) {
            self.cache.remove_file(&link);
            return Err(HubError::Corrupt(format!(
                "{file} of {repo_id} (commit {commit}): {error}; it was removed from the cache"
            )));
        }
        Ok(link)
    }

    fn repo(&self, repo_id: &str, revision: &str) -> hf_hub::api::sync::ApiRepo {
        self.api.repo(Repo::with_revision(
            repo_id.to_owned(),
            RepoType::Model,
            revision.to_owned(),
        ))
    }
}

/// The blob's name is the file's ETag, which the Hub sets to the sha256 of an LFS file (64 hex
/// digits; a plain git file's is its git hash, which is not checked). Checks the bytes against it.
fn verify(link: &Path) -> Result<(), String> {
    // Where links cannot be made the crate moves the blob into the snapshot, losing its name.
    if !link
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        return Ok(());
    }
    let blob = std::fs::read_link(link).map_err(|e| format!("cannot read the cache link: {e}"))?;
    let etag = blob
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    if etag.len() != 64 || !etag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(());
    }
    let actual = sha256_of(link).map_err(|e| format!("cannot read it back: {e}"))?;
    if actual.eq_ignore_ascii_case(&etag) {
        Ok(())
    } else {
        Err(format!(
            "its sha256 is {actual} but the Hub gives {etag}: the download is corrupt"
        ))
    }
}

fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
