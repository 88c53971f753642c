//! The real default model's path and the golden reference, for the engine's and the
//! server's tests alike (the server's include this file with `#[path]`), so how they are
//! found and how their absence fails is written once. The golden file must fail loudly when
//! missing; the model's absence is `model.rs`'s to judge.
// Each test binary uses its own part of this file.
#![allow(dead_code)]

use std::path::PathBuf;

/// The default model, which must exist (see `model.rs` for when a test skips instead).
pub fn model_path() -> PathBuf {
    super::model::path()
}

/// `../shared/golden/smollm2-golden.json`: see `../shared/golden/README.md` for the fields.
#[derive(serde::Deserialize)]
pub struct Golden {
    pub cases: Vec<GoldenCase>,
}

#[derive(serde::Deserialize)]
pub struct GoldenCase {
    pub name: String,
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    /// The reference's argmax at every prompt position (teacher forcing).
    pub prompt_argmax: Vec<u32>,
    /// `(token, logit)` for the ten largest logits after the whole prompt.
    pub first_step_top10: Vec<(u32, f64)>,
    pub greedy_ids: Vec<u32>,
    pub greedy_top1_margin: Vec<f64>,
    pub greedy_text: String,
}

/// The golden reference lives beside the repository (`../shared/golden`, with the script
/// that made it), not in it. A missing or unreadable file fails the test.
pub fn golden() -> Golden {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/golden/smollm2-golden.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "golden reference {} is required and could not be read ({e}); \
             it comes from ../shared/golden/golden.py beside the repository",
            path.display()
        )
    });
    let golden: Golden = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("golden reference {}: {e}", path.display()));
    assert!(!golden.cases.is_empty(), "golden file has no cases");
    golden
}

/// One golden case by name.
pub fn golden_case(name: &str) -> GoldenCase {
    golden()
        .cases
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("golden file has no {name} case"))
}
