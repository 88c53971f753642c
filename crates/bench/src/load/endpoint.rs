//! `Endpoint` (`--endpoint`): which OpenAI route the requests of a run are sent to.

use clap::ValueEnum;

/// Which OpenAI endpoint carries the prompts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Endpoint {
    /// `POST /v1/completions`, prompt as text (or token ids).
    Completions,
    /// `POST /v1/chat/completions`, prompt as one user message.
    Chat,
}
