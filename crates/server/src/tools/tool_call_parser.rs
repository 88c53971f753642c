//! `ToolCallParser`: finds tool calls in a chat reply as it streams, and splits them from the
//! text around them (`--tool-call-parser`).
//!
//! Two styles are read. Hermes (Qwen, NousResearch, and the format the server's own tools
//! prompt asks for): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks anywhere
//! in the reply. Llama 3: the whole reply is a bare JSON object `{"name": ..., "parameters":
//! {...}}` (or several separated by `;`). A block whose JSON does not hold a call stays text,
//! so nothing the model wrote is lost. Text that may still become a `<tool_call>` tag, and a
//! reply that opens like a bare JSON call, are held back until decided, so a call never leaks
//! into `content` half-written.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use clap::ValueEnum;
use serde_json::Value;

use crate::tools::reasoning_parser::release_until_tag;

/// `--tool-call-parser`: how the model writes its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ToolCallParserKind {
    /// `<tool_call>{json}</tool_call>` blocks (Hermes, Qwen).
    Hermes,
    /// A reply that is one bare JSON call, or several separated by `;` (Llama 3).
    #[value(name = "llama3_json")]
    Llama3Json,
    /// Hermes blocks, and a reply that is a bare JSON call.
    #[default]
    Auto,
}

/// One parsed call, as `message.tool_calls` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Position among the reply's calls (the `index` of streamed `tool_calls` deltas).
    pub index: usize,
    pub id: String,
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
}

/// What one piece of output turned into.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ToolSplit {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Outside any call.
    Text,
    /// Inside `<tool_call>`, waiting for its end.
    InTag,
    /// The reply opened with `{`: held whole, it is judged at the end.
    BareJson,
}

/// The parser of one choice.
#[derive(Debug)]
pub struct ToolCallParser {
    kind: ToolCallParserKind,
    /// With `parallel_tool_calls: false`, calls after the first are dropped.
    parallel: bool,
    phase: Phase,
    held: String,
    /// Nothing but whitespace since the start or the last call: such whitespace is dropped
    /// if a call follows (or nothing does), and a reply that is still here may be bare JSON.
    at_boundary: bool,
    calls: usize,
    /// A forced tool choice: the grammar allowed nothing but calls, so any other text is the
    /// grammar's layout or a call cut off by `max_tokens`, never content.
    calls_only: bool,
}

impl ToolCallParser {
    pub fn new(kind: ToolCallParserKind, parallel: bool) -> Self {
        Self {
            kind,
            parallel,
            phase: Phase::Text,
            held: String::new(),
            at_boundary: true,
            calls: 0,
            calls_only: false,
        }
    }

    /// A parser for a reply held to calls (`tool_choice` `required` or a named function).
    pub fn calls_only(mut self) -> Self {
        self.calls_only = true;
        self
    }

    fn without_text(&self, mut split: ToolSplit) -> ToolSplit {
        if self.calls_only {
            split.content.clear();
        }
        split
    }

    /// Calls found so far (the reply's `finish_reason` is `tool_calls` when there are any).
    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn push(&mut self, text: &str) -> ToolSplit {
        self.held.push_str(text);
        let mut split = ToolSplit::default();
        self.advance(&mut split);
        self.without_text(split)
    }

    /// Whatever is still held at the end of the reply.
    pub fn finish(&mut self) -> ToolSplit {
        let split = self.finish_held();
        self.without_text(split)
    }

    fn finish_held(&mut self) -> ToolSplit {
        let mut split = ToolSplit::default();
        match self.phase {
            Phase::Text => {
                let held = std::mem::take(&mut self.held);
                // Whitespace after the last call is layout; a reply of whitespace alone is text.
                if !(self.at_boundary && self.calls > 0 && held.trim().is_empty()) {
                    split.content.push_str(&held);
                }
            }
            Phase::InTag => {
                // A reply cut off (or ended by the model) before `</tool_call>` still holds a
                // call if its JSON is whole.
                let body = std::mem::take(&mut self.held);
                match parse_call(&body) {
                    Some(call) => self.add_call(call, &mut split),
                    None => split.content = format!("{OPEN}{body}"),
                }
            }
            Phase::BareJson => {
                let held = std::mem::take(&mut self.held);
                match parse_bare_calls(&held) {
                    Some(calls) => {
                        for call in calls {
                            self.add_call(call, &mut split);
                        }
                    }
                    None if self.kind == ToolCallParserKind::Auto => {
                        // Not a bare call: read it again as text that may hold tagged calls.
                        self.phase = Phase::Text;
                        self.at_boundary = false;
                        self.held = held;
                        self.advance(&mut split);
                        let rest = self.finish_held();
                        split.content.push_str(&rest.content);
                        split.calls.extend(rest.calls);
                    }
                    None => split.content = held,
                }
            }
        }
        split
    }

    fn advance(&mut self, split: &mut ToolSplit) {
        loop {
            match self.phase {
                Phase::Text => {
                    if self.at_boundary {
                        let rest = self.held.trim_start();
                        let bare_allowed = self.kind != ToolCallParserKind::Hermes;
                        if bare_allowed && self.calls == 0 && rest.starts_with('{') {
                            self.phase = Phase::BareJson;
                            continue;
                        }
                        let tags = self.kind != ToolCallParserKind::Llama3Json;
                        if rest.is_empty() || (tags && OPEN.starts_with(rest)) {
                            return;
                        }
                        if tags && rest.starts_with(OPEN) {
                            // Whitespace before a call is layout, not content.
                            let skip = self.held.len() - rest.len();
                            self.held.drain(..skip);
                        } else {
                            self.at_boundary = false;
                        }
                    }
                    if self.kind == ToolCallParserKind::Llama3Json {
                        split.content.push_str(&std::mem::take(&mut self.held));
                        return;
                    }
                    if !release_until_tag(&mut self.held, OPEN, &mut split.content) {
                        return;
                    }
                    self.phase = Phase::InTag;
                }
                Phase::InTag => {
                    let Some(at) = self.held.find(CLOSE) else {
                        return;
                    };
                    let body: String = self.held.drain(..at + CLOSE.len()).collect();
                    let body = &body[..at];
                    match parse_call(body) {
                        Some(call) => {
                            self.add_call(call, split);
                            self.at_boundary = true;
                        }
                        None => {
                            split.content.push_str(&format!("{OPEN}{body}{CLOSE}"));
                            self.at_boundary = false;
                        }
                    }
                    self.phase = Phase::Text;
                }
                Phase::BareJson => return,
            }
        }
    }

    fn add_call(&mut self, (name, arguments): (String, String), split: &mut ToolSplit) {
        if self.calls > 0 && !self.parallel {
            return;
        }
        split.calls.push(ToolCall {
            index: self.calls,
            id: call_id(),
            name,
            arguments,
        });
        self.calls += 1;
    }
}

/// `{"name": ..., "arguments" | "parameters": {...}}` as the name and the arguments' JSON
/// text; `None` for anything else. Arguments already sent as JSON text are kept as they are.
fn parse_call(text: &str) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let object = value.as_object()?;
    let name = object.get("name")?.as_str()?.to_owned();
    let arguments = match object.get("arguments").or_else(|| object.get("parameters")) {
        None => "{}".to_owned(),
        Some(Value::String(text)) => text.clone(),
        Some(arguments @ Value::Object(_)) => arguments.to_string(),
        Some(_) => return None,
    };
    Some((name, arguments))
}

/// A whole reply of bare calls: one JSON object, or several separated by `;`.
fn parse_bare_calls(text: &str) -> Option<Vec<(String, String)>> {
    if let Some(call) = parse_call(text) {
        return Some(vec![call]);
    }
    text.split(';')
        .filter(|piece| !piece.trim().is_empty())
        .map(parse_call)
        .collect::<Option<Vec<_>>>()
        .filter(|calls| !calls.is_empty())
}

/// `call_` and 24 hex digits from the standard library's per-process random hash keys:
/// unique enough to pair a call with its result, without a random-number crate.
fn call_id() -> String {
    let high = RandomState::new().hash_one(0u8);
    let low = RandomState::new().hash_one(1u8);
    format!("call_{:016x}{:08x}", high, low as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calls (name, arguments) and the content, from `pieces` pushed one by one.
    fn parse_pieces(
        kind: ToolCallParserKind,
        parallel: bool,
        pieces: &[&str],
    ) -> (Vec<(String, String)>, String) {
        let mut parser = ToolCallParser::new(kind, parallel);
        let mut total = ToolSplit::default();
        for piece in pieces {
            let split = parser.push(piece);
            total.content.push_str(&split.content);
            total.calls.extend(split.calls);
        }
        let split = parser.finish();
        total.content.push_str(&split.content);
        total.calls.extend(split.calls);
        for (i, call) in total.calls.iter().enumerate() {
            assert_eq!(call.index, i);
            assert!(call.id.starts_with("call_"));
        }
        assert_eq!(parser.calls(), total.calls.len());
        let calls = total
            .calls
            .into_iter()
            .map(|c| (c.name, c.arguments))
            .collect();
        (calls, total.content)
    }

    fn parse(kind: ToolCallParserKind, text: &str) -> (Vec<(String, String)>, String) {
        parse_pieces(kind, true, &[text])
    }

    fn call(name: &str, arguments: &str) -> (String, String) {
        (name.to_owned(), arguments.to_owned())
    }

    #[test]
    fn a_hermes_block_becomes_a_call_and_the_text_around_it_content() {
        let (calls, content) = parse(
            ToolCallParserKind::Hermes,
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        );
        assert_eq!(calls, [call("get_weather", r#"{"city":"Paris"}"#)]);
        assert_eq!(content, "Let me look.\n");
    }

    #[test]
    fn several_hermes_blocks_become_several_calls_without_the_whitespace_between() {
        let text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\
                    <tool_call>{\"name\": \"b\", \"arguments\": {\"x\": 1}}</tool_call>\n";
        let (calls, content) = parse(ToolCallParserKind::Auto, text);
        assert_eq!(calls, [call("a", "{}"), call("b", r#"{"x":1}"#)]);
        assert_eq!(content, "");
    }

    #[test]
    fn without_parallel_calls_only_the_first_is_kept() {
        let text =
            "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
        let (calls, content) = parse_pieces(ToolCallParserKind::Hermes, false, &[text]);
        assert_eq!(calls, [call("a", "{}")]);
        assert_eq!(content, "");
    }

    #[test]
    fn a_bare_llama3_object_is_a_call_under_llama3_json_and_auto() {
        let text = " {\"name\": \"search\", \"parameters\": {\"q\": \"rust\"}}";
        for kind in [ToolCallParserKind::Llama3Json, ToolCallParserKind::Auto] {
            let (calls, content) = parse(kind, text);
            assert_eq!(calls, [call("search", r#"{"q":"rust"}"#)], "{kind:?}");
            assert_eq!(content, "");
        }
        let (calls, content) = parse(ToolCallParserKind::Hermes, text);
        assert!(calls.is_empty());
        assert_eq!(content, text);
        let two = "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}";
        let (calls, _) = parse(ToolCallParserKind::Llama3Json, two);
        assert_eq!(calls, [call("a", "{}"), call("b", "{}")]);
    }

    #[test]
    fn llama3_json_ignores_hermes_tags() {
        let text = "<tool_call>{\"name\": \"a\"}</tool_call>";
        let (calls, content) = parse(ToolCallParserKind::Llama3Json, text);
        assert!(calls.is_empty());
        assert_eq!(content, text);
    }

    #[test]
    fn malformed_json_is_left_as_content() {
        for text in [
            "<tool_call>{\"name\": \"a\", </tool_call> after",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>[1, 2]</tool_call>",
            "<tool_call>{\"name\": \"a\"",
        ] {
            let (calls, content) = parse(ToolCallParserKind::Auto, text);
            assert!(calls.is_empty(), "{text}");
            assert_eq!(content, text);
        }
        let (calls, content) = parse(ToolCallParserKind::Auto, "{\"not\": \"a call\"} ok");
        assert!(calls.is_empty());
        assert_eq!(content, "{\"not\": \"a call\"} ok");
    }

    #[test]
    fn an_unclosed_block_with_whole_json_is_still_a_call() {
        let (calls, content) = parse(
            ToolCallParserKind::Hermes,
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": true}}\n",
        );
        assert_eq!(calls, [call("a", r#"{"k":true}"#)]);
        assert_eq!(content, "");
    }

    #[test]
    fn a_forced_reply_cut_off_inside_its_next_call_keeps_its_calls_and_no_content() {
        let cut = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call";
        for forced in [false, true] {
            let mut parser = ToolCallParser::new(ToolCallParserKind::Hermes, true);
            if forced {
                parser = parser.calls_only();
            }
            let mut split = parser.push(cut);
            let end = parser.finish();
            split.content.push_str(&end.content);
            split.calls.extend(end.calls);
            assert_eq!(split.calls.len(), 1);
            // Unforced, the fragment may be the model's own text, so it is kept.
            assert_eq!(split.content, if forced { "" } else { "\n<tool_call" });
        }
    }

    #[test]
    fn text_without_calls_passes_through_whole() {
        for text in ["Hello there.", "  indented", "a < b and <tool", "\n\n"] {
            let (calls, content) = parse(ToolCallParserKind::Auto, text);
            assert!(calls.is_empty());
            assert_eq!(content, text);
        }
    }

    #[test]
    fn output_split_at_every_byte_boundary_parses_as_it_does_whole() {
        let texts = [
            "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x</tool\"}}\n</tool_call>\n<tool_call>{\"name\": \"g\"}</tool_call> done",
            "{\"name\": \"f\", \"parameters\": {\"a\": 1}}",
            "<tool_call>{oops}</tool_call> and <tool_ca",
            "<tool<tool_call>{\"name\": \"h\", \"arguments\": \"{}\"}</tool_call>",
        ];
        for text in texts {
            let whole = parse(ToolCallParserKind::Auto, text);
            for at in 1..text.len() {
                let split =
                    parse_pieces(ToolCallParserKind::Auto, true, &[&text[..at], &text[at..]]);
                assert_eq!(split, whole, "{text:?} split at {at}");
            }
            let bytes: Vec<String> = text.chars().map(String::from).collect();
            let pieces: Vec<&str> = bytes.iter().map(String::as_str).collect();
            assert_eq!(
                parse_pieces(ToolCallParserKind::Auto, true, &pieces),
                whole,
                "{text:?} one character at a time"
            );
        }
    }

    #[test]
    fn a_partial_tag_is_held_until_decided() {
        let mut parser = ToolCallParser::new(ToolCallParserKind::Hermes, true);
        assert_eq!(parser.push("Hi <tool").content, "Hi ");
        assert_eq!(parser.push("box>").content, "<toolbox>");
        assert_eq!(parser.push(" <tool_call>{\"name\"").content, " ");
        let split = parser.push(": \"f\"}</tool_call>");
        assert_eq!(split.calls.len(), 1);
        assert_eq!(split.calls[0].name, "f");
    }

    #[test]
    fn the_flag_takes_vllm_s_parser_names() {
        for (name, kind) in [
            ("hermes", ToolCallParserKind::Hermes),
            ("llama3_json", ToolCallParserKind::Llama3Json),
            ("auto", ToolCallParserKind::Auto),
        ] {
            assert_eq!(ToolCallParserKind::from_str(name, false), Ok(kind));
        }
        assert_eq!(ToolCallParserKind::default(), ToolCallParserKind::Auto);
    }
}
