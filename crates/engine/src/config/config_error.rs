//! `ConfigError`: one refused engine setting, named as its config field and flag are.

/// A refused setting: which one (named as the config field and the vLLM flag are), its
/// value, and why it cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} = {value}: {reason}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn new(
        setting: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            setting,
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// The command-line flag that sets this value (`block_size` → `--block-size`).
    pub fn flag(&self) -> String {
        format!("--{}", self.setting.replace('_', "-"))
    }
}
