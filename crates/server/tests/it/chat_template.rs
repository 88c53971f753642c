//! Chat template rendering: the real SmolLM2 template against the golden prompt, and error handling.

use crate::common::reference;

use tokenmill_server::text::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
use tokenmill_server::text::tokenizer::{from_gguf_file, Tokenizer};

/// SmolLM2's template inserts this turn whenever the conversation does not open with a system message.
const SMOLLM2_DEFAULT_SYSTEM: &str =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

fn real_template() -> (Tokenizer, ChatTemplate) {
    let (tokenizer, source) = from_gguf_file(&reference::model_path()).expect("load GGUF");
    let source = source.expect("SmolLM2 GGUF ships a chat template");
    let template = ChatTemplate::for_tokenizer(source, &tokenizer).expect("compile template");
    (tokenizer, template)
}

/// The golden "chat-capital" case: its prompt text and ids.
fn golden_chat_capital() -> (String, Vec<u32>) {
    let case = reference::golden_case("chat-capital");
    (case.prompt, case.prompt_ids)
}

fn user(content: &str) -> ChatMessage {
    ChatMessage::new("user", content)
}

#[test]
fn smollm2_template_prepends_its_default_system_turn_to_the_golden_prompt() {
    crate::common::skip_without_model!();
    let (_, template) = real_template();
    let (golden_prompt, _) = golden_chat_capital();
    let rendered = template
        .render(&[user("What is the capital of France?")], true)
        .unwrap();
    assert_eq!(rendered, format!("{SMOLLM2_DEFAULT_SYSTEM}{golden_prompt}"));
}

#[test]
fn golden_prompt_ids_are_the_tail_of_the_rendered_prompt_ids() {
    crate::common::skip_without_model!();
    let (tokenizer, template) = real_template();
    let (_, golden_ids) = golden_chat_capital();
    let rendered = template
        .render(&[user("What is the capital of France?")], true)
        .unwrap();
    let ids = tokenizer.encode(&rendered, false).unwrap();
    assert!(ids.ends_with(&golden_ids), "{ids:?}");
    let system_ids = tokenizer.encode(SMOLLM2_DEFAULT_SYSTEM, false).unwrap();
    assert_eq!(ids.len(), system_ids.len() + golden_ids.len());
}

#[test]
fn explicit_system_message_replaces_the_default_one() {
    crate::common::skip_without_model!();
    let (_, template) = real_template();
    let (golden_prompt, _) = golden_chat_capital();
    let messages = [
        ChatMessage::new("system", "Be brief."),
        user("What is the capital of France?"),
    ];
    let rendered = template.render(&messages, true).unwrap();
    assert_eq!(
        rendered,
        format!("<|im_start|>system\nBe brief.<|im_end|>\n{golden_prompt}")
    );
}

#[test]
fn without_generation_prompt_no_assistant_turn_is_opened() {
    crate::common::skip_without_model!();
    let (_, template) = real_template();
    let messages = [ChatMessage::new("system", "S"), user("Hi")];
    let rendered = template.render(&messages, false).unwrap();
    assert_eq!(
        rendered,
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn raise_exception_surfaces_as_an_error_carrying_its_message() {
    let source = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with a user turn') }}{% endif %}ok";
    let template = ChatTemplate::new(source, "<s>", "</s>").unwrap();
    assert_eq!(template.render(&[user("hi")], false).unwrap(), "ok");
    let err = template
        .render(&[ChatMessage::new("assistant", "hi")], false)
        .unwrap_err();
    match &err {
        ChatTemplateError::Raised(message) => {
            assert_eq!(message, "Conversations must start with a user turn")
        }
        other => panic!("expected Raised, got {other:?}"),
    }
    assert!(err
        .to_string()
        .contains("Conversations must start with a user turn"));
}

#[test]
fn malformed_template_is_reported_as_a_syntax_error() {
    let err = ChatTemplate::new("{% for m in messages %}{{ m.content }}", "", "").unwrap_err();
    assert!(matches!(err, ChatTemplateError::Syntax(_)), "{err:?}");
}

#[test]
fn failing_expression_is_reported_as_a_render_error() {
    let template = ChatTemplate::new("{{ messages[0].content + 1 }}", "", "").unwrap();
    let err = template.render(&[user("hi")], false).unwrap_err();
    assert!(matches!(err, ChatTemplateError::Render(_)), "{err:?}");
}

#[test]
fn templates_see_bos_and_eos_tokens() {
    let template = ChatTemplate::new(
        "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
        "<s>",
        "</s>",
    )
    .unwrap();
    assert_eq!(template.render(&[user("x")], false).unwrap(), "<s>x</s>");
}

#[test]
fn python_string_methods_used_by_hf_templates_work() {
    let source = "{% for m in messages %}{% if m.content.startswith('  ') %}{{ m.content.strip().upper() }}|{{ m.content.split('b')[0].lstrip() }}|{{ m.content.rstrip().endswith('c') }}{% endif %}{% endfor %}";
    let template = ChatTemplate::new(source, "", "").unwrap();
    assert_eq!(
        template.render(&[user("  abc  ")], false).unwrap(),
        "ABC|a|True"
    );
}

#[test]
fn block_tags_swallow_their_own_line_like_hugging_face_rendering() {
    let source = "{% for m in messages %}\n  {% if true %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}\n{{ messages | length | tojson }}";
    let template = ChatTemplate::new(source, "", "").unwrap();
    assert_eq!(
        template.render(&[user("a"), user("b")], false).unwrap(),
        "[a]\n[b]\n2"
    );
}

#[test]
fn chat_template_kwargs_reach_the_template_but_never_replace_the_servers_variables() {
    let source = "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}\
                  {{ messages | length }}{{ add_generation_prompt }}";
    let template = ChatTemplate::new(source, "<s>", "</s>").unwrap();
    let kwargs = |value: serde_json::Value| value.as_object().unwrap().clone();
    let off = template
        .render_with(
            &[user("hi")],
            true,
            &kwargs(serde_json::json!({"enable_thinking": false})),
        )
        .unwrap();
    assert_eq!(off, "<think>\n\n</think>\n\n1True");
    let sneaky = kwargs(serde_json::json!({"messages": [], "add_generation_prompt": false}));
    assert_eq!(
        template.render_with(&[user("hi")], true, &sneaky).unwrap(),
        "1True"
    );
    assert_eq!(template.render(&[user("hi")], true).unwrap(), "1True");
}

/// A small template in the style of Qwen's: it lists `tools`, writes each assistant call
/// with `tojson` and answers tool turns in `<tool_response>`.
const TOOLS_TEMPLATE: &str = r#"{% if tools %}TOOLS:{% for tool in tools %} {{ tool.function.name }}{% endfor %}
{% endif %}{% for message in messages %}{{ message.role }}: {% if message.tool_calls is defined %}{% for call in message.tool_calls %}CALL {{ call.function.name }} {{ call.function.arguments | tojson }}{% endfor %}{% elif message.role == 'tool' %}RESULT[{{ message.tool_call_id }}] {{ message.content }}{% else %}{{ message.content }}{% endif %}
{% endfor %}"#;

#[test]
fn a_template_that_reads_tools_gets_them_and_the_tool_turns_as_they_are() {
    let template = ChatTemplate::new(TOOLS_TEMPLATE, "", "").unwrap();
    assert!(template.renders_tools());
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls = Some(vec![serde_json::json!({
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
    })]);
    let mut result = ChatMessage::new("tool", "sunny");
    result.tool_call_id = Some("call_1".into());
    let tools = [serde_json::json!({"type": "function", "function": {"name": "get_weather"}})];
    let rendered = template
        .render_with_tools(
            &[user("Weather?"), call, result],
            false,
            &serde_json::Map::new(),
            Some(&tools),
        )
        .unwrap();
    assert_eq!(
        rendered,
        // `trim_blocks` (Hugging Face's setting) eats the newline after each block tag.
        "TOOLS: get_weatheruser: Weather?assistant: CALL get_weather {\"city\":\"Paris\"}\
         tool: RESULT[call_1] sunny"
    );
    let without = template.render(&[user("Hi")], false).unwrap();
    assert_eq!(without, "user: Hi");
}

#[test]
fn smollm2_template_does_not_read_tools() {
    crate::common::skip_without_model!();
    let (_, template) = real_template();
    assert!(!template.renders_tools());
}
