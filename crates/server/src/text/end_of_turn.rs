//! `end_of_turn_ids`: the control tokens that end a model's turn besides its EOS, found by
//! name in the tokenizer, so a reply stops where the chat template would close the turn.

use crate::text::tokenizer::Tokenizer;

/// Spellings of the end-of-turn (and end-of-text) markers in common chat vocabularies:
/// Gemma, Llama 3, ChatML (Qwen, SmolLM), Phi, GPT-2-style end of text, DeepSeek, and the
/// tool-call ends of Llama 3.1 and gpt-oss. A GGUF file names one EOS id, and a chat model
/// trained to close turns with another marker otherwise runs on past its answer: Gemma 3's
/// file says `<eos>` while its turns end with `<end_of_turn>`.
const MARKERS: &[&str] = &[
    "<end_of_turn>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|return|>",
    "<|call|>",
    "<EOT>",
    "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
];

/// The ids of the markers this vocabulary holds as control tokens, other than `eos`, in id
/// order. Only control tokens count: a plain piece that happens to spell a marker is text.
pub fn end_of_turn_ids(tokenizer: &Tokenizer, eos: &[u32]) -> Vec<u32> {
    let mut ids: Vec<u32> = MARKERS
        .iter()
        .filter_map(|marker| tokenizer.control_token_id(marker))
        .filter(|id| !eos.contains(id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}
