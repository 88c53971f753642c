//! `Footprint`: the memory a model of a server with several is counted as holding under
//! `--models-memory-gib`, known before it loads: its weights' file size and its KV pool
//! (`--kv-cache-memory-gib`, which it backs in full once idle).

use std::fmt;
use std::path::Path;

use tokenmill_engine::EngineArgs;

const GIB: f64 = (1u64 << 30) as f64;

/// Extensions of the files a model folder's weights are in.
const WEIGHT_FILES: [&str; 4] = ["safetensors", "gguf", "bin", "pth"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// The weights' file size; `None` when they are not on disk before loading (a Hub name
    /// not downloaded yet, `--load-format dummy`).
    pub weights: Option<u64>,
    pub kv_cache: u64,
}

impl Footprint {
    /// `source` as `--model` takes it, built with `engine`'s flags.
    pub fn estimate(source: &str, engine: &EngineArgs) -> Self {
        let kv_cache = (engine.kv_cache_memory_gib.max(0.0) * GIB) as u64;
        let dummy = engine.load_format.eq_ignore_ascii_case("dummy");
        let weights = (!dummy).then(|| weights_size(Path::new(source))).flatten();
        Self { weights, kv_cache }
    }

    pub fn bytes(&self) -> u64 {
        self.weights.unwrap_or(0) + self.kv_cache
    }
}

impl fmt::Display for Footprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = |b: u64| b as f64 / GIB;
        match self.weights {
            Some(w) => write!(
                f,
                "{:.2} GiB (weights {:.2} GiB + KV cache {:.2} GiB)",
                gib(self.bytes()),
                gib(w),
                gib(self.kv_cache)
            ),
            None => write!(
                f,
                "{:.2} GiB (its KV cache; its weights are not on disk before it loads)",
                gib(self.kv_cache)
            ),
        }
    }
}

/// A file's size, or the sum of a folder's weight files; `None` if `path` is neither.
fn weights_size(path: &Path) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return Some(meta.len());
    }
    let total = std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            e.path()
                .extension()
                .is_some_and(|x| WEIGHT_FILES.iter().any(|w| x == *w))
        })
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        engine: EngineArgs,
    }

    #[test]
    fn a_file_counts_its_size_and_a_folder_its_weight_files_plus_the_kv_cache() {
        let dir = std::env::temp_dir().join(format!("tokenmill-footprint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("model.safetensors"), vec![0u8; 1000]).unwrap();
        std::fs::write(dir.join("config.json"), vec![0u8; 77]).unwrap();
        let engine = Flags::parse_from(["x", "--kv-cache-memory-gib", "0.5"]).engine;
        let folder = Footprint::estimate(&dir.display().to_string(), &engine);
        assert_eq!(folder.weights, Some(1000));
        assert_eq!(folder.kv_cache, 1 << 29);
        let file = Footprint::estimate(&dir.join("config.json").display().to_string(), &engine);
        assert_eq!(file.bytes(), 77 + (1 << 29));
        let hub = Footprint::estimate("org/not-downloaded", &engine);
        assert_eq!(hub.weights, None);
        assert_eq!(hub.bytes(), 1 << 29);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
