//! `ToolPrompt`: a conversation with tools made readable by a chat template that has no
//! notion of them (SmolLM2's, like many small models', renders only role and content).
//!
//! Such a template would drop `tools`, `tool_calls` and what a `tool` turn answers without a
//! trace, so the model would never learn of its tools. Instead the tools are described in a
//! Hermes-style system prompt, past calls are written as the `<tool_call>` blocks the model is
//! asked to produce, and tool results are wrapped in `<tool_response>`: the model then sees
//! one consistent format, the one `ToolCallParser` reads back.

use serde_json::{json, Value};

use crate::text::chat_template::ChatMessage;
use crate::tools::tool_request::ToolFunction;

/// Writes tools and tool turns into plain messages.
pub struct ToolPrompt<'a> {
    tools: &'a [ToolFunction],
}

impl<'a> ToolPrompt<'a> {
    /// `tools` is what the model is offered now (empty when none, or `tool_choice: "none"`).
    pub fn new(tools: &'a [ToolFunction]) -> Self {
        Self { tools }
    }

    /// The conversation with tool calls and results as text, and the tools described in the
    /// system message (merged into the first one when the conversation opens with one).
    pub fn apply(&self, messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
        let mut messages: Vec<ChatMessage> = messages.into_iter().map(as_text).collect();
        if self.tools.is_empty() {
            return messages;
        }
        let prompt = self.system_prompt();
        match messages.first_mut() {
            Some(first) if first.role == "system" => {
                first.content = format!("{}\n\n{prompt}", first.content);
            }
            _ => messages.insert(0, ChatMessage::new("system", prompt)),
        }
        messages
    }

    /// The tools as JSON signatures, and the output format the parser expects.
    pub fn system_prompt(&self) -> String {
        let signatures: Vec<String> = self
            .tools
            .iter()
            .map(|tool| spaced_json(&tool.openai_json()))
            .collect();
        format!(
            "You can call functions to help answer the user. These are the functions, as JSON \
             signatures inside <tools></tools> tags:\n<tools>\n{}\n</tools>\n\
             To call a function, answer with a JSON object holding its name and arguments \
             inside <tool_call></tool_call> tags, one block per call:\n\
             <tool_call>\n{{\"name\": \"<function name>\", \"arguments\": <arguments as a JSON \
             object>}}\n</tool_call>\n\
             Each function's result comes back inside <tool_response></tool_response> tags.",
            signatures.join("\n")
        )
    }
}

/// One turn with its tool parts written as text: an assistant's calls become `<tool_call>`
/// blocks after its content, a tool's result a `<tool_response>` block.
fn as_text(mut message: ChatMessage) -> ChatMessage {
    if let Some(calls) = message.tool_calls.take() {
        let blocks = calls.iter().map(|call| {
            let function = &call["function"];
            let written = json!({"name": function["name"], "arguments": function["arguments"]});
            format!("<tool_call>\n{}\n</tool_call>", spaced_json(&written))
        });
        let parts: Vec<String> = std::iter::once(message.content.clone())
            .filter(|content| !content.is_empty())
            .chain(blocks)
            .collect();
        message.content = parts.join("\n");
    }
    if message.role == "tool" {
        message.tool_call_id = None;
        message.content = format!("<tool_response>\n{}\n</tool_response>", message.content);
    }
    message
}

/// JSON as OpenAI and the tool grammar write it (`{"a": 1, "b": [2, 3]}`), so the calls the
/// model reads in its history look like the ones it is held to write.
fn spaced_json(value: &Value) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, SpacedFormatter);
    // Writing a `Value` into a `Vec` cannot fail.
    serde::Serialize::serialize(value, &mut serializer).expect("a JSON value serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// serde_json's compact formatter with a space after each `,` and `:`.
struct SpacedFormatter;

/// `", "` before every item but the first, of an array or an object.
fn separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for SpacedFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

/// The tools as a template that renders them is given them.
pub fn template_tools(tools: &[ToolFunction]) -> Vec<Value> {
    tools.iter().map(ToolFunction::openai_json).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> ToolFunction {
        ToolFunction {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: json!({"type": "object"}),
        }
    }

    #[test]
    fn tools_are_described_in_a_new_system_message_when_there_is_none() {
        let tools = [tool()];
        let messages = ToolPrompt::new(&tools).apply(vec![ChatMessage::new("user", "Hi")]);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].role, "system");
        assert!(messages[0]
            .content
            .contains(r#"{"type": "function", "function": {"name": "get_weather""#));
        assert!(messages[0].content.contains("<tool_call>"));
    }

    #[test]
    fn tools_are_merged_into_an_existing_system_message() {
        let tools = [tool()];
        let messages = ToolPrompt::new(&tools).apply(vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ]);
        assert_eq!(messages.len(), 2);
        assert!(messages[0].content.starts_with("Be brief.\n\n"));
        assert!(messages[0].content.contains("Weather in a city"));
    }

    #[test]
    fn past_calls_and_results_become_tagged_text() {
        let mut call = ChatMessage::new("assistant", "");
        call.tool_calls = Some(vec![json!({
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
        })]);
        let mut result = ChatMessage::new("tool", "sunny");
        result.tool_call_id = Some("call_1".into());
        let messages = ToolPrompt::new(&[]).apply(vec![call, result]);
        assert_eq!(
            messages[0].content,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
        );
        assert_eq!(messages[0].tool_calls, None);
        assert_eq!(
            messages[1].content,
            "<tool_response>\nsunny\n</tool_response>"
        );
    }
}
