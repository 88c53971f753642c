//! `ReasoningParser`: splits a chat reply's `<think>…</think>` into `reasoning_content`, as
//! vLLM's `--reasoning-parser qwen3` does, one text delta at a time.
//!
//! Reasoning is recognized only where the output opens with `<think>`: a model whose template
//! turned thinking off (`enable_thinking: false` writes an empty think block into the prompt)
//! answers with plain content, and a `<think>` in the middle of an answer is the answer's text.

use clap::ValueEnum;

/// `--reasoning-parser`: how a model marks its reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReasoningParserKind {
    /// `<think>reasoning</think>content` (Qwen3, DeepSeek-R1 style).
    Qwen3,
}

/// What a chat request asks done with the reasoning a parser splits off (SGLang's
/// `stream_reasoning`, vLLM's `include_reasoning`; SGLang's `separate_reasoning: false` asks
/// for no split at all, so it has no delivery).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningDelivery {
    /// `reasoning_content` as it is generated (the default).
    Stream,
    /// `reasoning_content` in one piece, once the reasoning has ended (`stream_reasoning:
    /// false`); the same as `Stream` for a reply that is not streamed.
    Whole,
    /// No `reasoning_content` at all (`include_reasoning: false`).
    Dropped,
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// One delta's text, split.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing decided yet: the text so far could still become `<think>`.
    Opening,
    Reasoning,
    Content,
}

/// The splitter of one choice. Text that may be the start of a tag is held back until the next
/// delta decides it, so a tag split across tokens never leaks into either field.
#[derive(Debug)]
pub struct ReasoningParser {
    phase: Phase,
    held: String,
}

impl ReasoningParser {
    pub fn new(_kind: ReasoningParserKind) -> Self {
        Self {
            phase: Phase::Opening,
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> Split {
        self.held.push_str(text);
        let mut split = Split::default();
        loop {
            match self.phase {
                Phase::Opening => {
                    if let Some(rest) = self.held.strip_prefix(OPEN) {
                        self.held = rest.to_owned();
                        self.phase = Phase::Reasoning;
                    } else if OPEN.starts_with(self.held.as_str()) {
                        return split;
                    } else {
                        self.phase = Phase::Content;
                    }
                }
                Phase::Reasoning => {
                    if !release_until_tag(&mut self.held, CLOSE, &mut split.reasoning) {
                        return split;
                    }
                    self.phase = Phase::Content;
                }
                Phase::Content => {
                    split.content.push_str(&std::mem::take(&mut self.held));
                    return split;
                }
            }
        }
    }

    /// Whatever is still held at the end: an unfinished think block is reasoning, an
    /// unfinished `<think` is content.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.phase {
            Phase::Reasoning => Split {
                reasoning: held,
                content: String::new(),
            },
            Phase::Opening | Phase::Content => Split {
                reasoning: String::new(),
                content: held,
            },
        }
    }
}

/// The step both parsers of tagged output (this one, `ToolCallParser`) take on held text:
/// moves `held` up to the first `tag` into `out` and drops the tag (`true`), or, with no
/// `tag` in it, moves all but an end that may begin one, held back until the next piece
/// (`false`).
pub(crate) fn release_until_tag(held: &mut String, tag: &str, out: &mut String) -> bool {
    if let Some(at) = held.find(tag) {
        out.push_str(&held[..at]);
        held.drain(..at + tag.len());
        return true;
    }
    let keep = partial_tag_len(held, tag);
    let rest = held.split_off(held.len() - keep);
    out.push_str(&std::mem::replace(held, rest));
    false
}

/// Byte length of the longest end of `text` that is a proper beginning of `tag`.
fn partial_tag_len(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| text.is_char_boundary(text.len().saturating_sub(n)) && text.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(pieces: &[&str]) -> Split {
        let mut parser = ReasoningParser::new(ReasoningParserKind::Qwen3);
        let mut splits: Vec<Split> = pieces.iter().map(|p| parser.push(p)).collect();
        splits.push(parser.finish());
        let mut total = Split::default();
        for piece in splits {
            total.reasoning.push_str(&piece.reasoning);
            total.content.push_str(&piece.content);
        }
        total
    }

    #[test]
    fn a_think_block_becomes_reasoning_and_the_rest_content() {
        let split = split_all(&["<think>", "\nhmm", "</think>", "\n\nYes."]);
        assert_eq!(split.reasoning, "\nhmm");
        assert_eq!(split.content, "\n\nYes.");
    }

    #[test]
    fn tags_split_across_deltas_are_still_found() {
        let split = split_all(&["<th", "ink>a", "b</", "thi", "nk>c"]);
        assert_eq!(split.reasoning, "ab");
        assert_eq!(split.content, "c");
    }

    #[test]
    fn output_without_an_opening_tag_is_all_content() {
        let split = split_all(&["Hello ", "<think>x</think>"]);
        assert_eq!(split.reasoning, "");
        assert_eq!(split.content, "Hello <think>x</think>");
        assert_eq!(split_all(&["<thi"]).content, "<thi");
    }

    #[test]
    fn an_unclosed_think_block_is_all_reasoning() {
        let split = split_all(&["<think>still going </thi"]);
        assert_eq!(split.reasoning, "still going </thi");
        assert_eq!(split.content, "");
    }

    #[test]
    fn a_partial_closing_tag_is_held_until_decided() {
        let mut parser = ReasoningParser::new(ReasoningParserKind::Qwen3);
        assert_eq!(parser.push("<think>a</").reasoning, "a");
        assert_eq!(parser.push("b").reasoning, "</b");
    }
}
