//! `OutputShaper`: a choice's deltas turned into Responses output items — `reasoning`,
//! `message` (one `output_text` part) and `function_call` — and the stream events that
//! build them (`response.output_item.added`, `response.content_part.added`,
//! `response.output_text.delta`, ..., `response.output_item.done`). A reply that is not
//! streamed is shaped the same way, its events left unsent, so both end with the same items.

use serde_json::{json, Value};

use crate::generate::choice_run::ChoiceDelta;
use crate::generate::reply_id::unique_suffix;

/// One stream event: its `type` and its body (which repeats the type; the stream adds the
/// `sequence_number`).
pub type OutputEvent = (&'static str, Value);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenKind {
    Reasoning,
    Message,
}

/// The item being written: text still arrives for it.
#[derive(Debug)]
struct OpenItem {
    kind: OpenKind,
    id: String,
    text: String,
}

#[derive(Debug, Default)]
pub struct OutputShaper {
    /// Finished items, in output order.
    items: Vec<Value>,
    open: Option<OpenItem>,
}

pub fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", unique_suffix())
}

impl OutputShaper {
    pub fn items(&self) -> &[Value] {
        &self.items
    }

    /// The events of one delta: reasoning, then text, then each completed call.
    pub fn push(&mut self, delta: &ChoiceDelta) -> Vec<OutputEvent> {
        let mut events = Vec::new();
        if !delta.reasoning.is_empty() {
            self.write(OpenKind::Reasoning, &delta.reasoning, &mut events);
        }
        if !delta.text.is_empty() {
            self.write(OpenKind::Message, &delta.text, &mut events);
        }
        for call in &delta.tool_calls {
            self.close("completed", &mut events);
            let index = self.items.len();
            let id = item_id("fc");
            let item = |arguments: &str, status: &str| {
                json!({
                    "id": id, "type": "function_call", "status": status,
                    "call_id": call.id, "name": call.name, "arguments": arguments,
                })
            };
            events.push(added(index, item("", "in_progress")));
            events.push((
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": call.arguments}),
            ));
            events.push((
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "name": call.name,
                       "arguments": call.arguments}),
            ));
            let done = item(&call.arguments, "completed");
            events.push(item_done(index, done.clone()));
            self.items.push(done);
        }
        events
    }

    /// Closes the item being written, with `status` (`incomplete` for a reply cut short).
    pub fn finish(&mut self, status: &str) -> Vec<OutputEvent> {
        let mut events = Vec::new();
        self.close(status, &mut events);
        events
    }

    fn write(&mut self, kind: OpenKind, text: &str, events: &mut Vec<OutputEvent>) {
        if self.open.as_ref().is_some_and(|open| open.kind != kind) {
            self.close("completed", events);
        }
        let index = self.items.len();
        let open = self.open.get_or_insert_with(|| {
            let id = match kind {
                OpenKind::Reasoning => item_id("rs"),
                OpenKind::Message => item_id("msg"),
            };
            let part = empty_part(kind);
            let item = match kind {
                OpenKind::Reasoning => json!({
                    "id": id, "type": "reasoning", "status": "in_progress",
                    "summary": [], "content": [],
                }),
                OpenKind::Message => json!({
                    "id": id, "type": "message", "role": "assistant",
                    "status": "in_progress", "content": [],
                }),
            };
            events.push(added(index, item));
            events.push((
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
            ));
            OpenItem {
                kind,
                id,
                text: String::new(),
            }
        });
        open.text.push_str(text);
        let mut delta = json!({
            "item_id": open.id, "output_index": index, "content_index": 0, "delta": text,
        });
        let kind_name = match kind {
            OpenKind::Reasoning => "response.reasoning_text.delta",
            OpenKind::Message => {
                delta["logprobs"] = json!([]);
                "response.output_text.delta"
            }
        };
        events.push((kind_name, delta));
    }

    fn close(&mut self, status: &str, events: &mut Vec<OutputEvent>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let index = self.items.len();
        let mut part = empty_part(open.kind);
        part["text"] = open.text.clone().into();
        let mut done = json!({
            "item_id": open.id, "output_index": index, "content_index": 0, "text": open.text,
        });
        let item = match open.kind {
            OpenKind::Reasoning => {
                events.push(("response.reasoning_text.done", done));
                json!({
                    "id": open.id, "type": "reasoning", "status": status,
                    "summary": [], "content": [part],
                })
            }
            OpenKind::Message => {
                done["logprobs"] = json!([]);
                events.push(("response.output_text.done", done));
                json!({
                    "id": open.id, "type": "message", "role": "assistant", "status": status,
                    "content": [part],
                })
            }
        };
        events.push((
            "response.content_part.done",
            json!({"item_id": open.id, "output_index": index, "content_index": 0,
                   "part": part}),
        ));
        events.push(item_done(index, item.clone()));
        self.items.push(item);
    }
}

fn empty_part(kind: OpenKind) -> Value {
    match kind {
        OpenKind::Reasoning => json!({"type": "reasoning_text", "text": ""}),
        OpenKind::Message => {
            json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []})
        }
    }
}

fn added(index: usize, item: Value) -> OutputEvent {
    (
        "response.output_item.added",
        json!({"output_index": index, "item": item}),
    )
}

fn item_done(index: usize, item: Value) -> OutputEvent {
    (
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tool_call_parser::ToolCall;

    fn types(events: &[OutputEvent]) -> Vec<&str> {
        events.iter().map(|(t, _)| *t).collect()
    }

    #[test]
    fn reasoning_then_text_then_a_call_make_three_items_in_order() {
        let mut shaper = OutputShaper::default();
        let mut events = shaper.push(&ChoiceDelta {
            reasoning: "hm".into(),
            ..Default::default()
        });
        events.extend(shaper.push(&ChoiceDelta {
            text: "Hi".into(),
            ..Default::default()
        }));
        events.extend(shaper.push(&ChoiceDelta {
            text: "!".into(),
            tool_calls: vec![ToolCall {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            ..Default::default()
        }));
        events.extend(shaper.finish("completed"));
        assert_eq!(
            types(&events),
            [
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
            ]
        );
        let items = shaper.items();
        assert_eq!(items[0]["content"][0]["text"], "hm");
        assert_eq!(items[1]["content"][0]["text"], "Hi!");
        assert_eq!(items[2]["call_id"], "call_1");
        assert_eq!(events[8].1["output_index"], 1);
    }

    #[test]
    fn a_reply_cut_short_leaves_its_last_item_incomplete() {
        let mut shaper = OutputShaper::default();
        shaper.push(&ChoiceDelta {
            text: "Hi".into(),
            ..Default::default()
        });
        shaper.finish("incomplete");
        assert_eq!(shaper.items()[0]["status"], "incomplete");
    }
}
