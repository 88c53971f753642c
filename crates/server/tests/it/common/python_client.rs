//! Runs one of the official Python clients' scripts (`tests/*.py`) against a served model:
//! each script exits 3 when its package cannot be imported, 1 on a failed check.

use std::process::Command;

/// Whether the full tier must have a script's package: `openai` it always installs, others
/// (`anthropic`) it installs where it can and skips their test where it cannot.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Package {
    Required(&'static str),
    Optional(&'static str),
}

/// Runs `tests/{script}` with `args` on the Python in `TOKENMILL_PYTHON` (default
/// `python3`). Returns `false` after saying SKIPPED where the script cannot import its
/// package and that is allowed: always for an optional one, and for a required one where
/// the variable is unset (the offline tier). Otherwise a missing package fails the test, as
/// does any failed check.
pub fn run_client_script(script: &str, package: Package, args: &[&str]) -> bool {
    let (package, optional) = match package {
        Package::Required(name) => (name, false),
        Package::Optional(name) => (name, true),
    };
    let chosen = std::env::var("TOKENMILL_PYTHON").ok();
    let python = chosen.clone().unwrap_or_else(|| "python3".into());
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(&python)
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python} ({e}): set TOKENMILL_PYTHON, as scripts/test.sh does")
        });
    let stderr = String::from_utf8_lossy(&output.stderr);
    if (optional || chosen.is_none()) && output.status.code() == Some(3) {
        super::model::say_skipped(&format!(
            "{python} lacks the {package} package (scripts/test.sh installs it in a venv)"
        ));
        return false;
    }
    assert_ne!(
        output.status.code(),
        Some(3),
        "`import {package}` failed with {python}: {stderr}\n\
         install it in a venv and point TOKENMILL_PYTHON at its python, as scripts/test.sh does"
    );
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{stderr}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    true
}
