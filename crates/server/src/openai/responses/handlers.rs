//! `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`: OpenAI's Responses API.
//!
//! A request is translated into a chat request (`responses::translate`) and planned by
//! `plan_chat`, as chat completions are; its one choice runs like theirs (`start_runs`), and
//! only the shape of the reply is this protocol's (`responses::reply`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::Uri;
use axum::response::Response;
use axum::{Extension, Json};
use serde_json::{json, Value};

use crate::api::api_error::ApiError;
use crate::generate::engine_runs::start_runs;
use crate::generate::request_plan::Endpoint;
use crate::openai::chat_completions::plan_chat;
use crate::openai::responses::output::item_id;
use crate::openai::responses::reply::{respond, skeleton, Reply};
use crate::openai::responses::request::{check_fields, ResponsesRequest};
use crate::openai::responses::store::ResponseStore;
use crate::openai::responses::translate::{responses_param, translate};
use crate::serving::app_state::AppState;
use crate::serving::json_body::JsonBody;

pub async fn create(
    State(state): State<Arc<AppState>>,
    Extension(store): Extension<Arc<ResponseStore>>,
    JsonBody(body): JsonBody<ResponsesRequest>,
) -> Result<Response, ApiError> {
    state.check_model(body.model.as_deref())?;
    check_fields(&body)?;
    let earlier = match body.previous_response_id.as_deref() {
        Some(id) => {
            let stored = store.get(id).map_err(|error| ApiError {
                param: Some("previous_response_id".into()),
                ..error
            })?;
            stored.continued()
        }
        None => Vec::new(),
    };
    let translated = translate(&body, earlier)?;
    let plan = plan_chat(state.clone(), translated.chat)
        .await
        .map_err(responses_param)?;
    let input_tokens: usize = plan.prompt_lens.iter().sum();
    let mut runs = start_runs(&state, &plan, Endpoint::Chat)
        .await
        .map_err(responses_param)?;
    let run = runs
        .pop()
        .ok_or_else(|| ApiError::internal("a response was planned with no choice"))?;
    let store_it = body.store.unwrap_or(true) && store.enabled();
    let reply = Reply {
        id: item_id("resp"),
        skeleton: skeleton(&state, &body, store_it),
        input_tokens,
        store: store_it.then_some((store, translated.conversation)),
    };
    respond(run, reply, body.stream == Some(true)).await
}

pub async fn retrieve(
    Extension(store): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(store.get(&id)?.response))
}

pub async fn delete(
    Extension(store): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    store.remove(&id)?;
    Ok(Json(
        json!({"id": id, "object": "response.deleted", "deleted": true}),
    ))
}

/// `GET /v1/responses/{id}/input_items`: the items the response was generated from (those of
/// the responses it continued included; its `instructions` are not an item), as OpenAI pages
/// them: `order` (`desc`, the default, or `asc`), `limit` (1 to 100, default 20) and `after`
/// (the id of the item the page starts after).
pub async fn input_items(
    Extension(store): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let page = Page::from_query(uri.query().unwrap_or(""))?;
    let mut items = store.get(&id)?.conversation;
    if page.descending {
        items.reverse();
    }
    let start = match &page.after {
        Some(after) => {
            let at = items
                .iter()
                .position(|item| item["id"] == after.as_str())
                .ok_or_else(|| {
                    ApiError::bad_param("after", format!("no input item `{after}` in `{id}`"))
                })?;
            at + 1
        }
        None => 0,
    };
    let rest = &items[start..];
    let data: Vec<Value> = rest.iter().take(page.limit).cloned().collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "first_id": data.first().map(|item| item["id"].clone()),
        "last_id": data.last().map(|item| item["id"].clone()),
        "has_more": rest.len() > page.limit,
    })))
}

/// The paging of `input_items`.
struct Page {
    descending: bool,
    limit: usize,
    after: Option<String>,
}

impl Page {
    fn from_query(query: &str) -> Result<Self, ApiError> {
        let mut page = Page {
            descending: true,
            limit: 20,
            after: None,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "order" => {
                    page.descending = match value {
                        "desc" => true,
                        "asc" => false,
                        _ => {
                            return Err(ApiError::bad_param(
                                "order",
                                "`order` must be `asc` or `desc`",
                            ))
                        }
                    }
                }
                "limit" => {
                    page.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| {
                            ApiError::bad_param("limit", "`limit` must be between 1 and 100")
                        })?
                }
                "after" => page.after = Some(value.to_owned()),
                // OpenAI's `include` adds data there is none of here; an empty one asks nothing.
                "include" | "include[]" if value.is_empty() => {}
                other => {
                    return Err(ApiError::bad_param(
                        other,
                        format!("`{other}` is not supported on input_items"),
                    ))
                }
            }
        }
        Ok(page)
    }
}
