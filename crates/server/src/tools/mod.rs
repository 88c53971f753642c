//! Tool calling and reasoning: the tools a request offers (`tool_request`), how the prompt
//! and the grammar present them (`tool_prompt`, `tool_grammar`), and the parsers that read a
//! reply's text as it streams — tool calls, and `<think>` reasoning, which lives here because
//! it splits the same reply text at the same point and the tool-call parser reuses its
//! holding back of a tag cut between deltas.

pub mod reasoning_parser;
pub mod tool_call_parser;
pub mod tool_grammar;
pub mod tool_prompt;
pub mod tool_request;
