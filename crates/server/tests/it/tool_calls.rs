//! Tool calling over HTTP against the real default model (SmolLM2, whose template does not
//! render tools, so the server's Hermes-style prompt is what the model sees): forced calls
//! parse and validate against their tool's schema, streamed calls reassemble to the whole
//! reply's, a conversation holding a call and its result goes on, `tool_choice: "none"` shows
//! and parses nothing, `--tool-call-parser` reads scripted replies as it says, and bad tool
//! fields are 400s naming them.

use crate::common;
use crate::common::schema_check;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};
use tokenmill_server::tools::tool_call_parser::ToolCallParserKind;

fn weather_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": false,
    })
}

fn time_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"timezone": {"type": "string", "maxLength": 30}},
        "required": ["timezone"],
        "additionalProperties": false,
    })
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": weather_schema(),
        }},
        {"type": "function", "function": {
            "name": "get_time",
            "description": "Current time in a timezone",
            "parameters": time_schema(),
        }},
    ])
}

fn schema_of(name: &str) -> Value {
    match name {
        "get_weather" => weather_schema(),
        "get_time" => time_schema(),
        other => panic!("the model called `{other}`, which is not a tool"),
    }
}

fn tool_request(extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": tools(),
        "max_tokens": 80,
        "temperature": 0,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// Checks one `message.tool_calls` entry and returns its name and parsed arguments.
fn checked_call(call: &Value) -> (String, Value) {
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
    assert_eq!(call["type"], "function", "{call}");
    let name = call["function"]["name"].as_str().unwrap().to_owned();
    let text = call["function"]["arguments"]
        .as_str()
        .expect("arguments are JSON text");
    let arguments: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("arguments {text:?}: {e}"));
    schema_check::check(&schema_of(&name), &arguments)
        .unwrap_or_else(|e| panic!("{name} arguments {text}: {e}"));
    (name, arguments)
}

#[tokio::test]
async fn required_with_two_tools_gives_calls_whose_arguments_validate() {
    crate::common::skip_without_model!();
    // With parallel calls allowed this small model repeats its call until `max_tokens`: every
    // call it completed must still validate, and the cut is reported as `length`.
    for (seed, parallel) in [(0, false), (1, false), (2, true), (3, true)] {
        let (status, reply) = post_json(
            "/v1/chat/completions",
            tool_request(json!({
                "tool_choice": "required", "temperature": 1, "seed": seed,
                "parallel_tool_calls": parallel,
            })),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        let choice = &reply["choices"][0];
        let calls = choice["message"]["tool_calls"]
            .as_array()
            .unwrap_or_else(|| panic!("no tool_calls: {reply}"));
        assert!(!calls.is_empty(), "{reply}");
        for call in calls {
            checked_call(call);
        }
        if parallel {
            assert!(
                ["tool_calls", "length"].contains(&choice["finish_reason"].as_str().unwrap()),
                "{reply}"
            );
        } else {
            assert_eq!(choice["finish_reason"], "tool_calls", "{reply}");
            assert_eq!(choice["message"]["content"], Value::Null, "{reply}");
        }
    }
}

#[tokio::test]
async fn a_named_function_is_the_only_one_called() {
    crate::common::skip_without_model!();
    let (status, reply) = post_json(
        "/v1/chat/completions",
        tool_request(json!({
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        })),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let calls = reply["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    for call in calls {
        assert_eq!(checked_call(call).0, "get_time", "{reply}");
    }
}

#[tokio::test]
async fn without_parallel_calls_a_forced_reply_holds_exactly_one_call() {
    crate::common::skip_without_model!();
    let (status, reply) = post_json(
        "/v1/chat/completions",
        tool_request(json!({"tool_choice": "required", "parallel_tool_calls": false})),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let calls = reply["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(calls.len(), 1, "{reply}");
    checked_call(&calls[0]);
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls");
}

/// Streamed `delta.tool_calls` put together per `index`, as OpenAI's clients do: the first
/// fragment brings the id, type and name, later ones append to the arguments.
fn reassembled_calls(chunks: &[Value]) -> Vec<Value> {
    let mut calls: BTreeMap<u64, Value> = BTreeMap::new();
    for chunk in chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            for fragment in choice["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let index = fragment["index"]
                    .as_u64()
                    .expect("every fragment has an index");
                let call = calls.entry(index).or_insert_with(|| {
                    assert!(
                        fragment["id"].is_string(),
                        "a call opens with its id: {fragment}"
                    );
                    json!({
                        "id": fragment["id"],
                        "type": fragment["type"],
                        "function": {"name": fragment["function"]["name"], "arguments": ""},
                    })
                });
                let more = fragment["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default();
                let so_far = call["function"]["arguments"].as_str().unwrap().to_owned();
                call["function"]["arguments"] = format!("{so_far}{more}").into();
            }
        }
    }
    calls.into_values().collect()
}

fn without_ids(calls: &[Value]) -> Vec<Value> {
    calls
        .iter()
        .map(|call| json!({"type": call["type"], "function": call["function"]}))
        .collect()
}

#[tokio::test]
async fn streamed_tool_call_deltas_reassemble_to_the_non_streamed_call() {
    crate::common::skip_without_model!();
    for parallel in [false, true] {
        let body =
            tool_request(json!({"tool_choice": "required", "parallel_tool_calls": parallel}));
        let (status, whole) = post_json("/v1/chat/completions", body.clone()).await;
        assert_eq!(status, 200, "{whole}");
        let mut streamed = body;
        streamed["stream"] = json!(true);
        let chunks = post_stream("/v1/chat/completions", streamed).await;
        let calls = reassembled_calls(&chunks);
        let choice = &whole["choices"][0];
        let expected = choice["message"]["tool_calls"].as_array().unwrap();
        assert!(!calls.is_empty(), "{chunks:?}");
        assert_eq!(without_ids(&calls), without_ids(expected));
        assert_eq!(
            streamed_text(&chunks, 0),
            choice["message"]["content"].as_str().unwrap_or_default()
        );
        assert_eq!(
            streamed_finish_reason(&chunks, 0).as_deref(),
            choice["finish_reason"].as_str()
        );
        let first = &chunks[0]["choices"][0]["delta"];
        assert_eq!(first["role"], "assistant", "{first}");
        assert_eq!(
            first["tool_calls"][0]["function"]["arguments"], "",
            "{first}"
        );
        assert!(
            first["tool_calls"][0]["function"]["name"].is_string(),
            "{first}"
        );
    }
}

fn conversation_with_a_tool_result() -> Value {
    json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
    ])
}

#[tokio::test]
async fn a_conversation_with_a_tool_call_and_its_result_continues_in_text() {
    crate::common::skip_without_model!();
    let (status, reply) = post_json(
        "/v1/chat/completions",
        json!({
            "messages": conversation_with_a_tool_result(),
            "tools": tools(),
            "tool_choice": "none",
            "max_tokens": 16,
            "temperature": 0,
        }),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let message = &reply["choices"][0]["message"];
    assert!(!message["content"].as_str().unwrap().is_empty(), "{reply}");
    assert!(message.get("tool_calls").is_none(), "{reply}");
    // SmolLM2's template knows no tools, so the call and its result reach it as text.
    let (status, tokens) = post_json(
        "/tokenize",
        json!({"messages": conversation_with_a_tool_result()}),
    )
    .await;
    assert_eq!(status, 200, "{tokens}");
    let ids: Vec<u32> = serde_json::from_value(tokens["tokens"].clone()).unwrap();
    let prompt = reference().tokenizer.decode(&ids, false).unwrap();
    assert!(
        prompt.contains(
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"
        ),
        "{prompt}"
    );
    assert!(
        prompt.contains("<tool_response>\n18 degrees and sunny\n</tool_response>"),
        "{prompt}"
    );
}

#[tokio::test]
async fn tool_choice_none_shows_no_tools_and_parses_no_calls() {
    crate::common::skip_without_model!();
    let ask = |extra: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "Call get_weather for Paris."}],
            "max_tokens": 40,
            "temperature": 0,
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post_json("/v1/chat/completions", body)
    };
    let (status, none) = ask(json!({"tools": tools(), "tool_choice": "none"})).await;
    assert_eq!(status, 200, "{none}");
    let (_, plain) = ask(json!({})).await;
    let (_, auto) = ask(json!({"tools": tools(), "tool_choice": "auto"})).await;
    assert_eq!(
        none["usage"]["prompt_tokens"],
        plain["usage"]["prompt_tokens"]
    );
    assert_eq!(
        none["choices"][0]["message"],
        plain["choices"][0]["message"]
    );
    assert!(none["choices"][0]["message"].get("tool_calls").is_none());
    assert_ne!(none["choices"][0]["finish_reason"], "tool_calls");
    // `auto` describes the tools in a system prompt, so the model sees more.
    assert!(
        auto["usage"]["prompt_tokens"].as_u64() > plain["usage"]["prompt_tokens"].as_u64(),
        "{auto}"
    );
}

#[tokio::test]
async fn bad_tools_and_tool_choices_are_400s_naming_the_field() {
    crate::common::skip_without_model!();
    let chat = common::chat_body;
    let unresolvable = json!([{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}},
    }}]);
    let cases = [
        (
            "/v1/chat/completions",
            chat(json!({"tools": [{"type": "function"}]})),
            "tools[0].function",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tools": [{"type": "function", "function": {"name": "has space"}}]})),
            "tools[0].function.name",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tools": [tools()[0], tools()[0]]})),
            "tools[1].function.name",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tools": tools(), "tool_choice": "sometimes"})),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            chat(
                json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "fly"}}}),
            ),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tool_choice": "required"})),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            chat(
                json!({"tools": tools(), "tool_choice": "required", "response_format": {"type": "json_object"}}),
            ),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tools": unresolvable, "tool_choice": "required"})),
            "tools",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"parallel_tool_calls": "yes"})),
            "parallel_tool_calls",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"functions": [{"name": "f"}]})),
            "functions",
        ),
        (
            "/v1/completions",
            json!({"prompt": "Hi", "tools": tools()}),
            "tools",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"messages": [{"role": "user", "content": "x", "tool_call_id": "call_1"}]})),
            "messages[0].tool_call_id",
        ),
    ];
    for (path, body, param) in cases {
        let (status, reply) = post_json(path, body.clone()).await;
        assert_eq!(status, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["param"], param, "{body}: {reply}");
    }
}

/// SmolLM2 does not call tools of its own accord, so these replies are written by a regex
/// constraint (allowed alongside `tool_choice: "auto"`) and only the parsing is under test.
fn scripted_reply(regex: &str, stream: bool) -> Value {
    tool_request(json!({
        "tool_choice": "auto",
        "structured_outputs": {"regex": regex},
        "stream": stream,
    }))
}

const TAGGED_REPLY: &str = r#"Checking\. <tool_call>\{"name": "get_time", "arguments": \{"timezone": "UTC"\}\}</tool_call>"#;
const BARE_REPLY: &str = r#"\{"name": "get_time", "parameters": \{"timezone": "UTC"\}\}"#;

#[tokio::test]
async fn under_the_default_auto_parser_tagged_and_bare_calls_are_split_from_the_reply() {
    crate::common::skip_without_model!();
    for (regex, content) in [
        (TAGGED_REPLY, json!("Checking. ")),
        (BARE_REPLY, Value::Null),
    ] {
        let (status, reply) = post_json("/v1/chat/completions", scripted_reply(regex, false)).await;
        assert_eq!(status, 200, "{reply}");
        let choice = &reply["choices"][0];
        assert_eq!(choice["message"]["content"], content, "{reply}");
        let calls = choice["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{reply}");
        assert_eq!(
            checked_call(&calls[0]),
            ("get_time".into(), json!({"timezone": "UTC"}))
        );
        assert_eq!(choice["finish_reason"], "tool_calls");

        let chunks = post_stream("/v1/chat/completions", scripted_reply(regex, true)).await;
        assert_eq!(without_ids(&reassembled_calls(&chunks)), without_ids(calls));
        assert_eq!(
            streamed_text(&chunks, 0),
            content.as_str().unwrap_or_default()
        );
        assert_eq!(
            streamed_finish_reason(&chunks, 0).as_deref(),
            Some("tool_calls")
        );
    }
}

fn llama3_json_server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        let options = ServerOptions {
            tool_call_parser: ToolCallParserKind::Llama3Json,
            ..ServerOptions::default()
        };
        start_server(&[], options)
    })
}

#[tokio::test]
async fn the_llama3_json_parser_reads_bare_calls_and_leaves_tags_as_text() {
    crate::common::skip_without_model!();
    let base = llama3_json_server().base_url();
    let ask = |regex: &str| {
        client()
            .post(format!("{base}/v1/chat/completions"))
            .json(&scripted_reply(regex, false))
            .send()
    };
    let tagged: Value = ask(TAGGED_REPLY).await.unwrap().json().await.unwrap();
    let message = &tagged["choices"][0]["message"];
    assert!(message.get("tool_calls").is_none(), "{tagged}");
    assert!(
        message["content"].as_str().unwrap().contains("<tool_call>"),
        "{tagged}"
    );
    assert_eq!(tagged["choices"][0]["finish_reason"], "stop");
    let bare: Value = ask(BARE_REPLY).await.unwrap().json().await.unwrap();
    let calls = bare["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(checked_call(&calls[0]).0, "get_time", "{bare}");
}
