//! The reply in Anthropic's shapes: a whole `message` object, or the SSE event sequence
//! `message_start`, `ping`, then per content block `content_block_start`,
//! `content_block_delta`s (`thinking_delta`, `text_delta`, `input_json_delta`) and
//! `content_block_stop`, then `message_delta` (stop reason and usage) and `message_stop`.
//!
//! Blocks come in the order the model wrote them: reasoning split off by `--reasoning-parser`
//! is a `thinking` block, text a `text` block, each parsed tool call a `tool_use` block.

use serde_json::{json, Value};

use crate::generate::choice_run::ChoiceDelta;
use crate::generate::choice_total::ChoiceTotal;
use crate::generate::reply_id::unique_suffix;
use crate::tools::tool_call_parser::ToolCall;

/// Anthropic's `stop_reason` for a choice's finish reason (and the stop string that ended
/// it, which Anthropic reports as `stop_sequence`). A reply the server cut short while
/// shutting down (`abort`) says `pause_turn`: it may be sent back as is to be continued.
/// `length` is `length_reason`: `max_tokens`, or `model_context_window_exceeded` where
/// `max_tokens` asked for more than the context had room for (Anthropic's newer models run
/// such a request and stop at the context's end, as the engine does).
pub fn stop_reason(
    finish_reason: Option<&str>,
    stop_string: Option<&str>,
    length_reason: &'static str,
) -> &'static str {
    match (finish_reason, stop_string) {
        (_, Some(_)) => "stop_sequence",
        (Some("length"), _) => length_reason,
        (Some("tool_calls"), _) => "tool_use",
        (Some("abort"), _) => "pause_turn",
        _ => "end_turn",
    }
}

/// A `tool_use` block's `input`: the call's arguments as the object they are.
fn tool_input(call: &ToolCall) -> Value {
    serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

fn tool_use_block(call: &ToolCall, input: Value) -> Value {
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

pub fn message_id() -> String {
    format!("msg_{}", unique_suffix())
}

/// One whole reply.
pub struct MessageReply {
    pub id: String,
    pub model: String,
    pub input_tokens: usize,
    /// The `stop_reason` of a reply cut by length (see `stop_reason`).
    pub length_reason: &'static str,
}

impl MessageReply {
    fn envelope(
        &self,
        content: Vec<Value>,
        stop: Value,
        stop_sequence: Option<&str>,
        output_tokens: usize,
    ) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": stop_sequence,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": output_tokens},
        })
    }

    /// The non-streamed reply: thinking, then text, then the calls.
    pub fn full(&self, total: &ChoiceTotal, stop_string: Option<&str>) -> Value {
        let mut content = Vec::new();
        if !total.reasoning.is_empty() {
            content.push(json!({"type": "thinking", "thinking": total.reasoning, "signature": ""}));
        }
        if !total.text.is_empty() || total.tool_calls.is_empty() {
            content.push(json!({"type": "text", "text": total.text}));
        }
        for call in &total.tool_calls {
            content.push(tool_use_block(call, tool_input(call)));
        }
        let stop = stop_reason(total.finish_reason, stop_string, self.length_reason);
        self.envelope(content, stop.into(), stop_string, total.tokens.len())
    }

    /// `message_start`'s message: no content yet, no stop reason.
    pub fn start(&self) -> Value {
        json!({"type": "message_start",
               "message": self.envelope(Vec::new(), Value::Null, None, 0)})
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
}

/// Turns a choice's deltas into Anthropic stream events (`(event name, data)` pairs).
#[derive(Debug)]
pub struct BlockStream {
    open: Option<Block>,
    /// The index the next block gets.
    next_index: usize,
    output_tokens: usize,
    length_reason: &'static str,
}

impl BlockStream {
    pub fn new(length_reason: &'static str) -> Self {
        Self {
            open: None,
            next_index: 0,
            output_tokens: 0,
            length_reason,
        }
    }

    fn close(&mut self, events: &mut Vec<(&'static str, Value)>) {
        if self.open.take().is_some() {
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.next_index - 1}),
            ));
        }
    }

    /// Continues the open block of this kind, or closes the open one and starts it.
    fn write(&mut self, kind: Block, text: &str, events: &mut Vec<(&'static str, Value)>) {
        if text.is_empty() {
            return;
        }
        if self.open != Some(kind) {
            self.close(events);
            let block = match kind {
                Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
                Block::Text => json!({"type": "text", "text": ""}),
            };
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": self.next_index,
                       "content_block": block}),
            ));
            self.open = Some(kind);
            self.next_index += 1;
        }
        let delta = match kind {
            Block::Thinking => json!({"type": "thinking_delta", "thinking": text}),
            Block::Text => json!({"type": "text_delta", "text": text}),
        };
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.next_index - 1, "delta": delta}),
        ));
    }

    /// The events of one delta; the last delta also closes the message.
    pub fn events(&mut self, delta: &ChoiceDelta) -> Vec<(&'static str, Value)> {
        let mut events = Vec::new();
        self.output_tokens += delta.tokens.len();
        self.write(Block::Thinking, &delta.reasoning, &mut events);
        self.write(Block::Text, &delta.text, &mut events);
        for call in &delta.tool_calls {
            self.close(&mut events);
            let index = self.next_index;
            self.next_index += 1;
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                       "content_block": tool_use_block(call, json!({}))}),
            ));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta",
                                 "partial_json": tool_input(call).to_string()}}),
            ));
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        if let Some(finish) = delta.finish_reason {
            if self.next_index == 0 {
                // A reply with nothing in it still has its one (empty) text block.
                self.open = Some(Block::Text);
                events.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}}),
                ));
                self.next_index = 1;
            }
            self.close(&mut events);
            let stop_string = delta.stop_string.as_deref();
            events.push((
                "message_delta",
                json!({"type": "message_delta",
                       "delta": {"stop_reason": stop_reason(Some(finish), stop_string, self.length_reason),
                                 "stop_sequence": stop_string},
                       "usage": {"output_tokens": self.output_tokens}}),
            ));
            events.push(("message_stop", json!({"type": "message_stop"})));
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(events: &[(&'static str, Value)]) -> Vec<&'static str> {
        events.iter().map(|(name, _)| *name).collect()
    }

    #[test]
    fn blocks_open_close_and_the_message_ends_with_its_stop_reason() {
        let mut stream = BlockStream::new("max_tokens");
        let thinking = ChoiceDelta {
            reasoning: "hm".into(),
            ..Default::default()
        };
        let mut events = stream.events(&thinking);
        events.extend(stream.events(&ChoiceDelta {
            text: "Hi".into(),
            ..Default::default()
        }));
        events.extend(stream.events(&ChoiceDelta {
            tool_calls: vec![ToolCall {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
                arguments: r#"{"a":1}"#.into(),
            }],
            finish_reason: Some("tool_calls"),
            ..Default::default()
        }));
        assert_eq!(
            names(&events),
            [
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(events[1].1["delta"]["type"], "thinking_delta");
        assert_eq!(events[4].1["delta"]["text"], "Hi");
        assert_eq!(events[6].1["content_block"]["name"], "f");
        assert_eq!(events[7].1["delta"]["partial_json"], r#"{"a":1}"#);
        assert_eq!(events[7].1["index"], 2);
        assert_eq!(events[9].1["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn stop_reasons_follow_anthropic_names() {
        assert_eq!(stop_reason(Some("stop"), None, "max_tokens"), "end_turn");
        assert_eq!(
            stop_reason(Some("stop"), Some("\n"), "max_tokens"),
            "stop_sequence"
        );
        assert_eq!(
            stop_reason(Some("length"), None, "max_tokens"),
            "max_tokens"
        );
        assert_eq!(
            stop_reason(Some("tool_calls"), None, "max_tokens"),
            "tool_use"
        );
    }
}
