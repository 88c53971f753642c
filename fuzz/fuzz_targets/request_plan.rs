//! A request body as sent to `/v1/completions` or `/v1/chat/completions` (the first byte picks
//! which) through every check the route makes before queueing: JSON depth, parsing, field
//! policy, prompt shapes, tools, request limits, tokenizing (and the chat template), then
//! `RequestPlan::new`. Bad input must come back as a 4xx `ApiError`, never a panic; a plan that
//! is accepted must be one the engine accepts too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenmill_fuzz::{engine_limits, text_side};
use tokenmill_server::api::api_error::ApiError;
use tokenmill_server::generate::field_policy::check_fields;
use tokenmill_server::api::generation_request::{
    chat_messages, prompt_inputs, GenerationRequest, PromptInput,
};
use tokenmill_server::serving::json_body::parse_json;
use tokenmill_server::serving::request_limits::RequestLimits;
use tokenmill_server::text::generation_config::GenerationConfig;
use tokenmill_server::generate::request_plan::{Endpoint, PlanRules, RequestPlan};
use tokenmill_server::generate::chat_prompt::{plan_tool_calls, ChatPrompt};
use tokenmill_server::tools::tool_call_parser::ToolCallParserKind;
use tokenmill_server::tools::tool_request::ToolRequest;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let endpoint = if which & 1 == 0 {
        Endpoint::Completions
    } else {
        Endpoint::Chat
    };
    match plan(endpoint, body) {
        Ok(plan) => {
            let limits = engine_limits();
            assert_eq!(plan.requests.len(), plan.prompt_lens.len() * plan.n);
            for request in &plan.requests {
                limits
                    .validate(request)
                    .expect("a planned request passes the engine's own checks");
            }
        }
        Err(error) => {
            assert!(
                error.status.is_client_error(),
                "bad input is the client's fault: {error:?}"
            );
            let _ = error.body().to_string();
        }
    }
});

/// What `openai::completions` and `openai::chat_completions` do before `generate`, with the
/// route's tokenizer, template and limits, minus the engine.
fn plan(endpoint: Endpoint, bytes: &[u8]) -> Result<RequestPlan, ApiError> {
    let text = text_side();
    let limits = RequestLimits::default();
    limits.check_json_depth(bytes)?;
    let body: GenerationRequest = parse_json(bytes)?;
    check_fields(&body, endpoint)?;
    let tokenize = |text_in: &str, add_special: bool, param: &str| {
        text.tokenizer
            .encode(text_in, add_special)
            .map_err(|e| ApiError::bad_param(param, e.to_string()))
    };
    let mut tools = None;
    let prompts = match endpoint {
        Endpoint::Completions => {
            let inputs = prompt_inputs(body.prompt.as_ref())?;
            limits.check(&body, inputs.len())?;
            inputs
                .into_iter()
                .map(|input| match input {
                    PromptInput::Text(t) => tokenize(&t, true, "prompt"),
                    PromptInput::Tokens(ids) => Ok(ids),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        Endpoint::Chat => {
            let messages = chat_messages(body.messages.as_deref())?;
            tools = ToolRequest::from_request(&body)?;
            limits.check(&body, 1)?;
            let kwargs = body.chat_template_kwargs.clone().unwrap_or_default();
            let prompt = ChatPrompt {
                messages: &messages,
                add_generation_prompt: body.add_generation_prompt.unwrap_or(true),
                kwargs: &kwargs,
                tools: tools.as_ref(),
            };
            let rendered = prompt.render(&text.chat_template)?;
            vec![tokenize(&rendered, false, "messages")?]
        }
    };
    let rules = PlanRules {
        engine: &engine_limits(),
        request_limits: &limits,
        defaults: &GenerationConfig::default(),
    };
    let mut plan = RequestPlan::new(&body, endpoint, prompts, &rules)?;
    if let Some(tools) = &tools {
        plan_tool_calls(&mut plan, tools, ToolCallParserKind::Auto)?;
    }
    Ok(plan)
}
