//! `/v1/responses` over HTTP: the same text as chat for the same conversation, the stream's
//! event sequence, function calls and their outputs, `text.format`, the store (retrieve,
//! delete, evict) and the fields refused by name.

use crate::common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::ServerOptions;
use tokenmill_server::serving::request_limits::RequestLimits;

async fn create(body: Value) -> (StatusCode, Value) {
    post_json("/v1/responses", body).await
}

/// Every event of a streamed response, as `(event name, data)`; the stream must end after a
/// terminal event.
async fn stream_events(base: &str, mut body: Value) -> Vec<(String, Value)> {
    body["stream"] = json!(true);
    let mut response = client()
        .post(format!("{base}/v1/responses"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{body}");
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = Some(n.trim().to_owned());
                }
                if let Some(d) = line.strip_prefix("data:") {
                    data = Some(serde_json::from_str::<Value>(d.trim()).unwrap());
                }
            }
            events.push((name.expect("every event is named"), data.unwrap()));
        }
    }
    events
}

fn id_of(response: &Value) -> String {
    response["id"].as_str().unwrap().to_owned()
}

fn message_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().unwrap().clone())
        .map(|part| part["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_string_input_gets_the_text_chat_gets_for_the_same_turn() {
    crate::common::skip_without_model!();
    let (status, response) = create(json!({
        "input": "Name a color.", "instructions": "Answer in one word.",
        "max_output_tokens": 8, "temperature": 0,
    }))
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let (_, chat) = post_json(
        "/v1/chat/completions",
        json!({"messages": [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "Name a color."},
        ], "max_tokens": 8, "temperature": 0}),
    )
    .await;
    assert_eq!(
        message_text(&response),
        chat["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(response["object"], "response");
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(response["instructions"], "Answer in one word.");
    let usage = &response["usage"];
    assert_eq!(usage["input_tokens"], chat["usage"]["prompt_tokens"]);
    assert_eq!(usage["output_tokens"], chat["usage"]["completion_tokens"]);
    let incomplete = chat["choices"][0]["finish_reason"] == "length";
    assert_eq!(
        response["status"],
        if incomplete {
            "incomplete"
        } else {
            "completed"
        }
    );
    if incomplete {
        assert_eq!(
            response["incomplete_details"]["reason"],
            "max_output_tokens"
        );
    }
}

#[tokio::test]
async fn a_stream_opens_writes_and_closes_its_items_in_order() {
    crate::common::skip_without_model!();
    let body = json!({"input": "Say hello.", "max_output_tokens": 6, "temperature": 0});
    let events = stream_events(&server().base_url(), body.clone()).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str());
    }
    let sequence: Vec<u64> = events
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>());
    let deltas = names
        .iter()
        .filter(|n| **n == "response.output_text.delta")
        .count();
    assert!(deltas >= 1, "{names:?}");
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]);
    let last = *names.last().unwrap();
    assert!(
        last == "response.completed" || last == "response.incomplete",
        "{last}"
    );
    expected.push(last);
    assert_eq!(names, expected);
    let streamed: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_owned())
        .collect();
    let done = events
        .iter()
        .find(|(n, _)| n == "response.output_text.done")
        .unwrap();
    assert_eq!(done.1["text"], streamed.as_str());
    let final_response = &events.last().unwrap().1["response"];
    assert_eq!(message_text(final_response), streamed);
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    // The same request not streamed writes the same text.
    let (_, whole) = create(body).await;
    assert_eq!(message_text(&whole), streamed);
}

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Current weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                          "required": ["city"], "additionalProperties": false}})
}

#[tokio::test]
async fn a_forced_call_streams_its_arguments_and_its_output_continues_the_response() {
    crate::common::skip_without_model!();
    let body = json!({
        "input": "What is the weather in Paris?",
        "tools": [weather_tool()],
        "tool_choice": {"type": "function", "name": "get_weather"},
        // One call, so the grammar ends the reply after it.
        "parallel_tool_calls": false,
        "max_output_tokens": 40, "temperature": 0,
    });
    let events = stream_events(&server().base_url(), body.clone()).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let at = |name: &str| names.iter().position(|n| *n == name).unwrap_or(usize::MAX);
    assert!(
        at("response.output_item.added") < at("response.function_call_arguments.delta")
            && at("response.function_call_arguments.delta")
                < at("response.function_call_arguments.done")
            && at("response.function_call_arguments.done") < at("response.output_item.done")
            && names.last() == Some(&"response.completed"),
        "{names:?}"
    );
    let (status, first) = create(body).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "function_call")
        .unwrap_or_else(|| panic!("no function_call: {first}"))
        .clone();
    assert_eq!(call["name"], "get_weather");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments["city"].is_string(), "{arguments}");
    // The call's output, sent against the stored response.
    let (status, second) = create(json!({
        "previous_response_id": first["id"],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 C"}],
        "tools": [weather_tool()], "tool_choice": "none",
        "max_output_tokens": 8, "temperature": 0,
    }))
    .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["previous_response_id"], first["id"]);
    // The same conversation sent whole gets the same reply.
    let (_, whole) = create(json!({
        "input": [
            {"role": "user", "content": "What is the weather in Paris?"},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 C"},
        ],
        "tools": [weather_tool()], "tool_choice": "none",
        "max_output_tokens": 8, "temperature": 0,
    }))
    .await;
    assert_eq!(message_text(&second), message_text(&whole));
    assert_eq!(
        second["usage"]["input_tokens"],
        whole["usage"]["input_tokens"]
    );
}

#[tokio::test]
async fn a_json_schema_format_holds_the_text_to_the_schema() {
    crate::common::skip_without_model!();
    let (status, response) = create(json!({
        "input": "Give a name and an age.",
        "text": {"format": {"type": "json_schema", "name": "person", "strict": true, "schema": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
            "required": ["name", "age"], "additionalProperties": false}}},
        "max_output_tokens": 40, "temperature": 0,
    }))
    .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["status"], "completed", "{response}");
    let person: Value = serde_json::from_str(&message_text(&response)).unwrap();
    assert!(
        person["name"].is_string() && person["age"].is_i64(),
        "{person}"
    );
    assert_eq!(response["text"]["format"]["name"], "person");
    let (status, error) = create(json!({
        "input": "x", "text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "nonsense"}}},
    }))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(
        error["error"]["param"]
            .as_str()
            .unwrap()
            .starts_with("text.format"),
        "{error}"
    );
}

#[tokio::test]
async fn a_stored_response_is_retrieved_deleted_and_then_missing() {
    crate::common::skip_without_model!();
    let (_, response) = create(json!({"input": "Hi", "max_output_tokens": 2})).await;
    let id = response["id"].as_str().unwrap();
    let got: Value = client()
        .get(url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got, response);
    let deleted = client()
        .delete(url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    let deleted: Value = deleted.json().await.unwrap();
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response.deleted", "deleted": true})
    );
    let missing = client()
        .get(url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let error: Value = missing.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    // Its input items, paged.
    let (_, chained) = create(json!({
        "previous_response_id": id_of(&create(json!({"input": "One", "max_output_tokens": 1})).await.1),
        "input": [{"role": "user", "content": "Two"}], "max_output_tokens": 1,
    }))
    .await;
    let list = |query: &str| {
        let request = client()
            .get(url(&format!(
                "/v1/responses/{}/input_items{query}",
                id_of(&chained)
            )))
            .send();
        async move {
            let response = request.await.unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    };
    let (status, page) = list("").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let roles: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{page}");
    assert_eq!(page["data"][0]["content"][0]["text"], "Two");
    let (_, first) = list("?order=asc&limit=1").await;
    assert_eq!(first["data"][0]["content"][0]["text"], "One");
    assert_eq!(first["has_more"], true);
    let after = first["last_id"].as_str().unwrap().to_owned();
    let (_, next) = list(&format!("?order=asc&after={after}")).await;
    assert_eq!(next["data"].as_array().unwrap().len(), 2, "{next}");
    assert_eq!(next["has_more"], false);
    let (status, error) = list("?starting_after=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["param"], "starting_after");
    // Not stored at all.
    let (_, unstored) =
        create(json!({"input": "Hi", "max_output_tokens": 2, "store": false})).await;
    assert_eq!(unstored["store"], false);
    let (status, error) = create(json!({
        "input": "Hi", "max_output_tokens": 2, "previous_response_id": unstored["id"],
    }))
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["error"]["param"], "previous_response_id");
}

#[tokio::test]
async fn the_store_keeps_only_the_most_recent_responses() {
    crate::common::skip_without_model!();
    let options = ServerOptions {
        request_limits: RequestLimits {
            max_stored_responses: 2,
            ..RequestLimits::default()
        },
        ..ServerOptions::default()
    };
    let small = tokio::task::spawn_blocking(move || start_server(&[], options))
        .await
        .unwrap();
    let base = small.base_url();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, response) = post_json_to(
            &base,
            "/v1/responses",
            json!({"input": "Hi", "max_output_tokens": 1}),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        ids.push(response["id"].as_str().unwrap().to_owned());
    }
    let status = |id: &String| {
        let request = client().get(format!("{base}/v1/responses/{id}")).send();
        async move { request.await.unwrap() }
    };
    let evicted = status(&ids[0]).await;
    assert_eq!(evicted.status(), StatusCode::NOT_FOUND);
    let error: Value = evicted.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("evicted") && message.contains("--max-stored-responses"),
        "{message}"
    );
    assert_eq!(status(&ids[1]).await.status(), StatusCode::OK);
    assert_eq!(status(&ids[2]).await.status(), StatusCode::OK);
    drop(small);
}

#[tokio::test]
async fn fields_that_are_not_honoured_are_refused_by_name() {
    crate::common::skip_without_model!();
    for (extra, param) in [
        (
            json!({"include": ["message.output_text.logprobs"]}),
            "include",
        ),
        (json!({"reasoning": {"effort": "high"}}), "reasoning.effort"),
        (json!({"truncation": "auto"}), "truncation"),
        (json!({"tools": [{"type": "web_search"}]}), "tools[0].type"),
        (json!({"frequency_penalty": 1}), "frequency_penalty"),
        (
            json!({"input": [{"role": "user", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "https://example.com/a.png"}]}]}),
            "input[0].content[1].type",
        ),
        (json!({"max_output_tokens": 0}), "max_output_tokens"),
    ] {
        let mut body = json!({"input": "Hi"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, error) = create(body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}");
    }
    let (status, _) = create(json!({
        "input": "Hi", "max_output_tokens": 1, "include": [], "user": "u",
        "service_tier": "auto", "truncation": "disabled", "metadata": {"k": "v"},
    }))
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn every_responses_route_wants_the_api_key() {
    crate::common::skip_without_model!();
    let options = ServerOptions {
        api_key: Some("sesame".into()),
        ..ServerOptions::default()
    };
    let keyed = tokio::task::spawn_blocking(move || start_server(&[], options))
        .await
        .unwrap();
    let base = keyed.base_url();
    let (status, _) = post_json_to(&base, "/v1/responses", json!({"input": "Hi"})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for path in ["/v1/responses/resp_x", "/v1/responses/resp_x/input_items"] {
        let response = client().get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let response = client()
        .post(format!("{base}/v1/responses"))
        .bearer_auth("sesame")
        .json(&json!({"input": "Hi", "max_output_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    drop(keyed);
}
