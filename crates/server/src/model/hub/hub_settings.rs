//! Where the Hub is and where its files are cached, read from the environment variables
//! `huggingface_hub` reads, with its defaults, so both tools share one cache and one login.

use std::path::PathBuf;

/// The public Hub, where `HF_ENDPOINT` does not name another.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The Hub's address, the cache, the token and whether the network may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// `HF_ENDPOINT`, without a trailing `/`.
    pub endpoint: String,
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub`; `HF_HOME` defaults to
    /// `${XDG_CACHE_HOME:-~/.cache}/huggingface`.
    pub cache_dir: PathBuf,
    /// `HF_TOKEN`, else the file `HF_TOKEN_PATH` (default `$HF_HOME/token`) that
    /// `huggingface-cli login` writes.
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE` set to 1, ON, YES or TRUE: only the cache is read.
    pub offline: bool,
    /// `HF_HUB_DISABLE_PROGRESS_BARS` set as above: log lines even on a terminal.
    pub no_progress_bars: bool,
}

impl HubSettings {
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// The settings `var` gives (a variable's value, `None` where unset).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let cache = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(var("HOME").unwrap_or_default()).join(".cache"));
            cache.join("huggingface")
        });
        // `HUGGINGFACE_HUB_CACHE` and `HUGGING_FACE_HUB_TOKEN` are the older names, still read.
        let cache_dir = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let path = var("HF_TOKEN_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| hf_home.join("token"));
                std::fs::read_to_string(path).ok()
            })
            .map(|token| token.trim().to_owned())
            .filter(|token| !token.is_empty());
        let endpoint = var("HF_ENDPOINT")
            .map(|endpoint| endpoint.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        Self {
            endpoint,
            cache_dir,
            token,
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| truthy(&v)),
            no_progress_bars: var("HF_HUB_DISABLE_PROGRESS_BARS").is_some_and(|v| truthy(&v)),
        }
    }
}

/// `huggingface_hub`'s reading of a boolean variable.
fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_uppercase().as_str(),
        "1" | "ON" | "YES" | "TRUE"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> HubSettings {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HubSettings::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn with_nothing_set_the_cache_is_under_the_home_directory() {
        let s = settings(&[("HOME", "/home/u")]);
        assert_eq!(s.cache_dir, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert_eq!(s.endpoint, DEFAULT_ENDPOINT);
        assert!(!s.offline);
        assert_eq!(s.token, None);
    }

    #[test]
    fn hf_home_moves_the_cache_and_hf_hub_cache_moves_it_again() {
        let s = settings(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x"), ("HF_HOME", "/hf")]);
        assert_eq!(s.cache_dir, PathBuf::from("/hf/hub"));
        let s = settings(&[("XDG_CACHE_HOME", "/x")]);
        assert_eq!(s.cache_dir, PathBuf::from("/x/huggingface/hub"));
        let s = settings(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c")]);
        assert_eq!(s.cache_dir, PathBuf::from("/c"));
    }

    #[test]
    fn the_endpoint_loses_its_trailing_slash_and_offline_reads_like_python() {
        let s = settings(&[
            ("HF_ENDPOINT", "http://127.0.0.1:9/"),
            ("HF_HUB_OFFLINE", "yes"),
            ("HF_TOKEN", " hf_abc\n"),
        ]);
        assert_eq!(s.endpoint, "http://127.0.0.1:9");
        assert!(s.offline);
        assert_eq!(s.token.as_deref(), Some("hf_abc"));
        assert!(!settings(&[("HF_HUB_OFFLINE", "0")]).offline);
    }
}
