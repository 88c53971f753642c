//! Reading the Hugging Face cache as `huggingface_hub` lays it out: per repository
//! `models--org--repo/` with `refs/<revision>` (the commit a branch or tag was last seen at),
//! `blobs/<etag>` (each file's bytes once) and `snapshots/<commit>/<path>` (links to blobs).

use std::path::{Path, PathBuf};

/// The cache root (`HF_HUB_CACHE`).
#[derive(Debug, Clone)]
pub struct HubCache {
    root: PathBuf,
}

impl HubCache {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `models--org--repo`.
    pub fn repo_dir(&self, repo_id: &str) -> PathBuf {
        self.root
            .join(format!("models--{}", repo_id.replace('/', "--")))
    }

    /// The commit `revision` stands for in the cache: the ref of a branch or tag, or the
    /// revision itself where it is a commit whose snapshot is there.
    pub fn commit_of(&self, repo_id: &str, revision: &str) -> Option<String> {
        let dir = self.repo_dir(repo_id);
        if let Ok(text) = std::fs::read_to_string(dir.join("refs").join(revision)) {
            let commit = text.trim();
            if !commit.is_empty() {
                return Some(commit.to_owned());
            }
        }
        let is_commit = revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit());
        (is_commit && dir.join("snapshots").join(revision).is_dir()).then(|| revision.to_owned())
    }

    pub fn snapshot_dir(&self, repo_id: &str, commit: &str) -> PathBuf {
        self.repo_dir(repo_id).join("snapshots").join(commit)
    }

    /// The snapshot's file for `file`, where it is there and its blob is whole (a link whose
    /// blob is missing, as after a refused download, is not).
    pub fn snapshot_file(&self, repo_id: &str, commit: &str, file: &str) -> Option<PathBuf> {
        let path = self.snapshot_dir(repo_id, commit).join(file);
        path.is_file().then_some(path)
    }

    /// Every file of a snapshot, as paths in the repository (`sub/file.gguf`), sorted.
    pub fn snapshot_files(&self, repo_id: &str, commit: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![(self.snapshot_dir(repo_id, commit), String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = entry.path();
                let rel = format!("{prefix}{name}");
                if path.is_dir() {
                    stack.push((path, format!("{rel}/")));
                } else if path.is_file() {
                    found.push(rel);
                }
            }
        }
        found.sort();
        found
    }

    /// Takes a fetched file out of the cache: its snapshot link and the blob it points to, so
    /// a bad download is fetched again rather than served.
    pub fn remove_file(&self, snapshot_file: &Path) {
        if let Ok(blob) = std::fs::canonicalize(snapshot_file) {
            let _ = std::fs::remove_file(blob);
        }
        let _ = std::fs::remove_file(snapshot_file);
    }

    /// Removes `refs/<commit>`: `huggingface_hub` writes no ref where the revision asked for
    /// is the commit itself, but the `hf-hub` crate does, so the cache is left as Python's.
    pub fn remove_commit_ref(&self, repo_id: &str, commit: &str) {
        let _ = std::fs::remove_file(self.repo_dir(repo_id).join("refs").join(commit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ref_or_a_snapshotted_commit_names_the_commit() {
        let root = std::env::temp_dir().join(format!("tokenmill-hub-cache-{}", std::process::id()));
        let cache = HubCache::new(root.clone());
        let repo = cache.repo_dir("org/repo");
        assert!(repo.ends_with("models--org--repo"));
        let commit = "0123456789abcdef0123456789abcdef01234567";
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots").join(commit).join("sub")).unwrap();
        std::fs::write(repo.join("refs/main"), format!("{commit}\n")).unwrap();
        let snap = repo.join("snapshots").join(commit);
        std::fs::write(snap.join("sub/a.gguf"), b"x").unwrap();
        std::fs::write(snap.join("config.json"), b"{}").unwrap();

        assert_eq!(cache.commit_of("org/repo", "main").as_deref(), Some(commit));
        assert_eq!(cache.commit_of("org/repo", commit).as_deref(), Some(commit));
        assert_eq!(cache.commit_of("org/repo", "dev"), None);
        assert_eq!(cache.commit_of("org/other", "main"), None);
        assert_eq!(
            cache.snapshot_files("org/repo", commit),
            vec!["config.json".to_owned(), "sub/a.gguf".to_owned()]
        );
        assert!(cache
            .snapshot_file("org/repo", commit, "sub/a.gguf")
            .is_some());
        assert!(cache.snapshot_file("org/repo", commit, "b.gguf").is_none());
        std::fs::remove_dir_all(root).unwrap();
    }
}
