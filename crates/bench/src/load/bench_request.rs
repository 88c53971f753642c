//! `BenchRequest`: one request of a run, its prompt and its lengths in tokens, whichever
//! dataset made it.

/// What goes into the request's `prompt` (or the user message for chat).
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    /// Raw token ids, accepted by `/v1/completions` when no tokenizer is reachable.
    TokenIds(Vec<u32>),
}

/// One request to send: the prompt, its length in tokens and how many tokens to ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRequest {
    pub prompt: Prompt,
    pub prompt_len: usize,
    pub output_len: usize,
}
