//! Whether a test that needs the default model runs, skips or fails, decided in one place for
//! the engine's, the server's and the `tokenmill` binary's tests (the latter two include this
//! file with `#[path]`).
//!
//! The offline tier (plain `cargo test`) may lack the model: such a test says SKIPPED and
//! passes. The full tier (`scripts/test.sh`, which CI runs) fetches the model and sets
//! `TOKENMILL_REQUIRE_MODEL=1`, so there a missing model fails the test: a skipped model test
//! would let a wrong engine pass CI.
#![allow(dead_code)] // Each crate's tests use their own part.

use std::io::Write;
use std::path::PathBuf;

/// Set (to anything) where a missing default model must fail the tests that need it.
pub const REQUIRE_ENV: &str = "TOKENMILL_REQUIRE_MODEL";

/// The default model (`default_model_path`: `TOKENMILL_MODEL`, else the cache that
/// `scripts/fetch-model.sh` fills), which must exist: call [`present`] first.
pub fn path() -> PathBuf {
    let path = tokenmill_engine::models::checkpoint::default_model_path();
    assert!(
        path.exists(),
        "default model not found at {}: run scripts/fetch-model.sh first (or set TOKENMILL_MODEL)",
        path.display()
    );
    path
}

/// A tiny model of the zoo beside the repository (`../shared/golden/zoo/<model>`, made by
/// its `make_zoo.py`), which every tier has: its absence fails the test, since a skipped zoo
/// would let a wrong architecture pass.
pub fn zoo(model: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/golden/zoo")
        .join(model);
    assert!(
        dir.join("reference.json").exists() && dir.join("tokenizer.json").exists(),
        "model zoo {} is required and missing; it comes from ../shared/golden/zoo/make_zoo.py \
         beside the repository",
        dir.display()
    );
    dir
}

/// Whether the default model is there; where it is not, fails the calling test if
/// `TOKENMILL_REQUIRE_MODEL` is set and otherwise says SKIPPED (see [`skip_without_model`]).
pub fn present() -> bool {
    let path = tokenmill_engine::models::checkpoint::default_model_path();
    if path.exists() {
        return true;
    }
    assert!(
        std::env::var_os(REQUIRE_ENV).is_none(),
        "default model not found at {}: run scripts/fetch-model.sh first (or set TOKENMILL_MODEL); \
         {REQUIRE_ENV} is set, so its absence fails the test",
        path.display()
    );
    // Once per test: a property test asks for every case.
    thread_local!(static SAID: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if !SAID.replace(true) {
        say_skipped(&format!(
            "the default model {} is absent (scripts/fetch-model.sh fetches it)",
            path.display()
        ));
    }
    false
}

/// A `SKIPPED <test>: <why>` line on this process's stderr, which the test harness does not
/// capture (it captures `eprintln!`, not writes to the handle), so a skip is seen without
/// `--nocapture`.
pub fn say_skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Returns from the calling test where the default model is absent and may be (see
/// [`present`]): the first line of every test that needs it. A property test's body returns
/// a value: `skip_without_model!(Ok(()))`.
macro_rules! skip_without_model {
    () => {
        $crate::common::skip_without_model!(())
    };
    ($pass:expr) => {
        if !$crate::common::model::present() {
            return $pass;
        }
    };
}
pub(crate) use skip_without_model;
