//! A local Hugging Face Hub over HTTP for the model-by-name tests: it answers the Hub's
//! documented endpoints for repositories made of local files, for tokenmill and for the
//! official `huggingface_hub` client alike, counts what it is asked, and can break a
//! transfer once or serve corrupt bytes on purpose.
//!
//! - `GET /api/models/{org}/{repo}/revision/{rev}`: `id`, `sha` (the commit) and `siblings`.
//! - `GET`/`HEAD /{org}/{repo}/resolve/{rev}/{path}`: the file, with `X-Repo-Commit`,
//!   `ETag` (the git blob id; for LFS files, the sha256, also as `X-Linked-Etag` with
//!   `X-Linked-Size`), `Content-Length`, `Accept-Ranges` and `Range` answered with 206.
//!
//! A revision is `main` or the commit; anything else is 404 `RevisionNotFound`, an unknown
//! repository 401 `RepositoryNotFound` (as the Hub answers an anonymous client), an unknown
//! file 404 `EntryNotFound`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Files served as LFS objects, as the Hub's default `.gitattributes` names them.
const LFS_EXTENSIONS: [&str; 3] = [".gguf", ".safetensors", ".bin"];

/// One file of a repository, read once when the hub starts.
struct HubFile {
    bytes: Bytes,
    sha256: String,
    git_oid: String,
}

impl HubFile {
    fn lfs(name: &str) -> bool {
        LFS_EXTENSIONS.iter().any(|ext| name.ends_with(ext))
    }
}

struct HubRepo {
    commit: String,
    files: BTreeMap<String, HubFile>,
}

/// A request the hub answered.
#[derive(Debug, Clone)]
pub struct HubRequest {
    pub method: String,
    /// The path, e.g. `/org/repo/resolve/main/config.json`.
    pub path: String,
    pub range: Option<String>,
    /// Body bytes sent (after a cut, those sent before it).
    pub sent: usize,
}

impl HubRequest {
    /// A `GET` of a file's bytes beyond the one-byte probe clients make to read its headers.
    pub fn is_download(&self) -> bool {
        self.method == "GET"
            && self.path.contains("/resolve/")
            && self.range.as_deref() != Some("bytes=0-0")
    }
}

#[derive(Default)]
struct Faults {
    /// The next downloads of this file, as many as the count, stop after this many bytes.
    cut: Option<(String, usize, usize)>,
    /// Files served with one byte changed (their headers keep the true sha256).
    corrupt: HashSet<String>,
}

struct Shared {
    repos: BTreeMap<String, HubRepo>,
    requests: Mutex<Vec<HubRequest>>,
    faults: Mutex<Faults>,
}

/// Builds the hub's repositories, then starts it.
#[derive(Default)]
pub struct LocalHubBuilder {
    repos: Vec<(String, Vec<(String, PathBuf)>)>,
}

impl LocalHubBuilder {
    /// A repository `repo_id` whose files are `(path in the repo, local file)`.
    pub fn repo(mut self, repo_id: &str, files: &[(&str, PathBuf)]) -> Self {
        let files = files
            .iter()
            .map(|(name, path)| (name.to_string(), path.clone()))
            .collect();
        self.repos.push((repo_id.to_owned(), files));
        self
    }

    /// A repository holding every file of a local folder (not its subfolders).
    pub fn folder_repo(self, repo_id: &str, dir: &std::path::Path) -> Self {
        let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .filter(|entry| entry.path().is_file())
            .map(|entry| {
                (
                    entry.file_name().to_string_lossy().into_owned(),
                    entry.path(),
                )
            })
            .collect();
        files.sort();
        let files: Vec<(&str, PathBuf)> =
            files.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
        self.repo(repo_id, &files)
    }

    pub fn start(self) -> LocalHub {
        let mut repos = BTreeMap::new();
        for (id, files) in self.repos {
            let mut commit_hash = Sha1::new();
            commit_hash.update(id.as_bytes());
            let mut served = BTreeMap::new();
            for (name, path) in files {
                let bytes = Bytes::from(
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
                );
                let sha256 = hex(&Sha256::digest(&bytes));
                let mut oid = Sha1::new();
                oid.update(format!("blob {}\0", bytes.len()).as_bytes());
                oid.update(&bytes);
                commit_hash.update(name.as_bytes());
                commit_hash.update(sha256.as_bytes());
                served.insert(
                    name,
                    HubFile {
                        bytes,
                        sha256,
                        git_oid: hex(&oid.finalize()),
                    },
                );
            }
            let commit = hex(&commit_hash.finalize());
            repos.insert(
                id,
                HubRepo {
                    commit,
                    files: served,
                },
            );
        }
        let shared = Arc::new(Shared {
            repos,
            requests: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
        });
        let app = Router::new()
            .route("/api/models/{org}/{name}/revision/{*rev}", get(api_model))
            .route("/{org}/{name}/resolve/{rev}/{*file}", get(resolve))
            .with_state(shared.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        LocalHub {
            endpoint: format!("http://{addr}"),
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }
}

/// The running hub; stopped on drop.
pub struct LocalHub {
    pub endpoint: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalHub {
    pub fn builder() -> LocalHubBuilder {
        LocalHubBuilder::default()
    }

    pub fn commit(&self, repo_id: &str) -> String {
        self.shared.repos[repo_id].commit.clone()
    }

    pub fn sha256(&self, repo_id: &str, file: &str) -> String {
        self.shared.repos[repo_id].files[file].sha256.clone()
    }

    pub fn requests(&self) -> Vec<HubRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    pub fn clear_requests(&self) {
        self.shared.requests.lock().unwrap().clear();
    }

    /// The downloads of files so far, as their paths in the repository.
    pub fn downloaded(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| r.is_download())
            .filter_map(|r| r.path.splitn(6, '/').nth(5).map(str::to_owned))
            .collect()
    }

    /// The next `times` downloads of `file` each stop after `bytes` bytes by dropping the
    /// connection.
    pub fn cut_downloads(&self, file: &str, bytes: usize, times: usize) {
        self.shared.faults.lock().unwrap().cut = Some((file.to_owned(), bytes, times));
    }

    /// Every download of `file` from now on has one byte changed.
    pub fn corrupt(&self, file: &str) {
        self.shared
            .faults
            .lock()
            .unwrap()
            .corrupt
            .insert(file.to_owned());
    }
}

impl Drop for LocalHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn not_found(code: StatusCode, error_code: &str, message: &str) -> Response {
    Response::builder()
        .status(code)
        .header("X-Error-Code", error_code)
        .header("X-Error-Message", message)
        .header("Content-Type", "application/json")
        .body(Body::from(format!("{{\"error\": \"{message}\"}}")))
        .unwrap()
}

/// The repository and commit a request names, or the Hub's error reply.
fn find<'a>(
    shared: &'a Shared,
    org: &str,
    name: &str,
    rev: &str,
) -> Result<(String, &'a HubRepo), Box<Response>> {
    let id = format!("{org}/{name}");
    let Some(repo) = shared.repos.get(&id) else {
        return Err(Box::new(not_found(
            StatusCode::UNAUTHORIZED,
            "RepositoryNotFound",
            "Repository not found",
        )));
    };
    if rev != "main" && rev != repo.commit {
        return Err(Box::new(not_found(
            StatusCode::NOT_FOUND,
            "RevisionNotFound",
            "Invalid rev id",
        )));
    }
    Ok((id, repo))
}

fn record(shared: &Shared, method: &Method, path: String, range: Option<String>, sent: usize) {
    shared.requests.lock().unwrap().push(HubRequest {
        method: method.to_string(),
        path,
        range,
        sent,
    });
}

async fn api_model(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path((org, name, rev)): Path<(String, String, String)>,
) -> Response {
    record(
        &shared,
        &method,
        format!("/api/models/{org}/{name}/revision/{rev}"),
        None,
        0,
    );
    let (id, repo) = match find(&shared, &org, &name, &rev) {
        Ok(found) => found,
        Err(reply) => return *reply,
    };
    let siblings: Vec<String> = repo
        .files
        .keys()
        .map(|f| format!("{{\"rfilename\": \"{f}\"}}"))
        .collect();
    let body = format!(
        "{{\"_id\": \"{commit}\", \"id\": \"{id}\", \"modelId\": \"{id}\", \"sha\": \"{commit}\", \
         \"private\": false, \"disabled\": false, \"gated\": false, \"tags\": [], \
         \"lastModified\": \"2026-01-01T00:00:00.000Z\", \"siblings\": [{}]}}",
        siblings.join(", "),
        commit = repo.commit,
    );
    Response::builder()
        .header("Content-Type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

/// `bytes=a-b` or `bytes=a-` of a file of `len` bytes, as the inclusive range to send.
fn parse_range(range: &str, len: usize) -> Option<(usize, usize)> {
    let (start, end) = range.strip_prefix("bytes=")?.split_once('-')?;
    let start: usize = start.parse().ok()?;
    let end = if end.is_empty() {
        len.checked_sub(1)?
    } else {
        end.parse::<usize>().ok()?.min(len.checked_sub(1)?)
    };
    (start <= end).then_some((start, end))
}

async fn resolve(
    State(shared): State<Arc<Shared>>,
    method: Method,
    headers: HeaderMap,
    Path((org, name, rev, file)): Path<(String, String, String, String)>,
) -> Response {
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let path = format!("/{org}/{name}/resolve/{rev}/{file}");
    let (_, repo) = match find(&shared, &org, &name, &rev) {
        Ok(found) => found,
        Err(reply) => {
            record(&shared, &method, path, range, 0);
            return *reply;
        }
    };
    let Some(served) = repo.files.get(&file) else {
        record(&shared, &method, path, range, 0);
        return not_found(StatusCode::NOT_FOUND, "EntryNotFound", "Entry not found");
    };
    let len = served.bytes.len();
    let mut reply = Response::builder()
        .header("X-Repo-Commit", &repo.commit)
        .header("Accept-Ranges", "bytes")
        .header("Content-Type", "application/octet-stream");
    reply = if HubFile::lfs(&file) {
        reply
            .header("ETag", format!("\"{}\"", served.sha256))
            .header("X-Linked-Etag", format!("\"{}\"", served.sha256))
            .header("X-Linked-Size", len.to_string())
    } else {
        reply.header("ETag", format!("\"{}\"", served.git_oid))
    };
    if method == Method::HEAD {
        record(&shared, &method, path, range, 0);
        return reply
            .header("Content-Length", len.to_string())
            .body(Body::empty())
            .unwrap();
    }
    let (start, end, status) = match range.as_deref() {
        None => (0, len.saturating_sub(1), StatusCode::OK),
        Some(asked) => match parse_range(asked, len) {
            Some((start, end)) => (start, end, StatusCode::PARTIAL_CONTENT),
            None => {
                record(&shared, &method, path, range, 0);
                return Response::builder()
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header("Content-Range", format!("bytes */{len}"))
                    .body(Body::empty())
                    .unwrap();
            }
        },
    };
    if status == StatusCode::PARTIAL_CONTENT {
        reply = reply.header("Content-Range", format!("bytes {start}-{end}/{len}"));
    }
    let mut body = if len == 0 {
        Bytes::new()
    } else {
        served.bytes.slice(start..=end)
    };
    let (cut, corrupt) = {
        let mut faults = shared.faults.lock().unwrap();
        let cut = match &mut faults.cut {
            Some((name, at, left)) if *name == file && *at < body.len() => {
                let at = *at;
                *left -= 1;
                if *left == 0 {
                    faults.cut = None;
                }
                Some(at)
            }
            _ => None,
        };
        (cut, faults.corrupt.contains(&file))
    };
    if corrupt && !body.is_empty() {
        let mut changed = body.to_vec();
        let last = changed.len() - 1;
        changed[last] ^= 0xff;
        body = Bytes::from(changed);
    }
    let full = body.len();
    reply = reply
        .status(status)
        .header("Content-Length", full.to_string());
    match cut {
        None => {
            record(&shared, &method, path, range, full);
            reply.body(Body::from(body)).unwrap()
        }
        Some(at) => {
            record(&shared, &method, path, range, at);
            // The promised length is not met: the client sees the connection end mid-body.
            // The pause lets the bytes before the cut leave the server's buffers first.
            let sent = futures_util::stream::iter([Ok::<_, std::io::Error>(body.slice(..at))]);
            let cut = futures_util::stream::once(async {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                Err(std::io::Error::other("the local hub cuts this transfer"))
            });
            reply
                .body(Body::from_stream(futures_util::StreamExt::chain(sent, cut)))
                .unwrap()
        }
    }
}
