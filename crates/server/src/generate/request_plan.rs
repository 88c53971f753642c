//! `RequestPlan`: a checked generation request — the engine requests to run (one per choice)
//! and how their output is shaped — built before anything is queued, so bad input is
//! answered with a 400 and never half-started.

use std::collections::BTreeMap;

use serde_json::Value;
use tokenmill_engine::sample::logit_bias::LogitBias;
use tokenmill_engine::sample::sampling_params::MAX_LOGPROBS;
use tokenmill_engine::{EngineLimits, Request, SamplingParams};

use crate::api::api_error::ApiError;
use crate::api::generation_request::{stop_strings, GenerationRequest};
use crate::serving::app_state::AppState;
use crate::serving::request_limits::RequestLimits;
use crate::structured_output::StructuredOutput;
use crate::text::generation_config::GenerationConfig;
use crate::tools::reasoning_parser::ReasoningDelivery;
use crate::tools::tool_call_parser::ToolCallParserKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

/// A prompt as completions' `echo` repeats it: its text, and its first token, which has no
/// logprob to report. Part of the plan (the route fills it) that the reply builder reads.
#[derive(Debug, Clone)]
pub struct EchoedPrompt {
    pub text: String,
    pub first_token: u32,
}

/// What a request is planned under: the engine's limits, the server's per-request bounds,
/// and the defaults (`generation_config.json`) for what the request leaves unset.
#[derive(Debug, Clone, Copy)]
pub struct PlanRules<'a> {
    pub engine: &'a EngineLimits,
    pub request_limits: &'a RequestLimits,
    pub defaults: &'a GenerationConfig,
}

impl<'a> PlanRules<'a> {
    /// What this server plans every generation request under. Built here from the state,
    /// not by the state, so the state names no plan.
    pub fn of(state: &'a AppState) -> Self {
        PlanRules {
            engine: state.handle.limits(),
            request_limits: &state.limits,
            defaults: &state.generation_config,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RequestPlan {
    /// Prompt lengths, one per prompt; choice `i` belongs to prompt `i / n`.
    pub prompt_lens: Vec<usize>,
    pub n: usize,
    /// One engine request per choice, in choice-index order.
    pub requests: Vec<Request>,
    pub stop: Vec<String>,
    /// A matched stop string stays in the text (vLLM's `include_stop_str_in_output`).
    pub include_stop_str_in_output: bool,
    pub skip_special_tokens: bool,
    /// Alternatives per token to report; `Some(0)` reports only the chosen token's logprob.
    pub logprobs: Option<usize>,
    /// Alternatives per prompt token for `prompt_logprobs` (completions).
    pub prompt_logprobs: Option<usize>,
    /// Completions' `echo`: the reply repeats the prompt (and, with `logprobs`, scores it).
    pub echo: bool,
    /// Logprobs name tokens by id (`token_id:<id>`), as vLLM's `return_tokens_as_token_ids`.
    pub tokens_as_ids: bool,
    /// Per prompt, what `echo` repeats; filled by the completions route, which has the texts.
    pub echoed: Vec<EchoedPrompt>,
    pub stream: bool,
    pub include_usage: bool,
    /// The output constraint, compiled when the requests are queued (it is slow to compile).
    pub structured: Option<StructuredOutput>,
    /// Chat with tools: how tool calls are split from the reply (set by the chat route).
    pub tool_call_parser: Option<ToolCallParserKind>,
    /// More than one tool call per reply may be kept (`parallel_tool_calls`).
    pub parallel_tool_calls: bool,
    /// A forced tool choice: the reply holds calls only, never content.
    pub tool_calls_only: bool,
    /// Chat with `--reasoning-parser`: what is done with the reasoning; `None` leaves it in
    /// the content (`separate_reasoning: false`).
    pub reasoning: Option<ReasoningDelivery>,
    /// Chat's `echo`: the last message's content, which each choice's reply starts with
    /// (set by the chat route, which has the messages).
    pub chat_echo: Option<String>,
}

impl RequestPlan {
    /// Checks the request and resolves every default it leaves to the server, once: the
    /// file's sampling defaults, and a length (the rest of the context, capped by the file's
    /// `max_new_tokens`) for a reply that asks for none.
    pub fn new(
        body: &GenerationRequest,
        endpoint: Endpoint,
        prompts: Vec<Vec<u32>>,
        rules: &PlanRules,
    ) -> Result<Self, ApiError> {
        let PlanRules {
            engine: limits,
            request_limits,
            defaults,
        } = *rules;
        request_limits.check(body, prompts.len())?;
        let stream = body.stream.unwrap_or(false);
        // Chat reads `echo` too, as a different request (see `chat_echo`).
        let echo = endpoint == Endpoint::Completions && body.echo.unwrap_or(false);
        if stream && body.prompt_logprobs.is_some() {
            return Err(ApiError::bad_param(
                "prompt_logprobs",
                "`prompt_logprobs` is not supported with `stream`",
            ));
        }
        if body.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::bad_param("suffix", "`suffix` is not supported"));
        }
        let n = request_limits.choices_per_prompt(body.n)?;
        let structured = StructuredOutput::from_request(body)?;
        let max_tokens = requested_max_tokens(body)?;
        let prompt_param = match endpoint {
            Endpoint::Completions => "prompt",
            Endpoint::Chat => "messages",
        };
        let mut base = sampling_params(body, defaults, endpoint, limits.vocab_size)?;
        let prompt_logprobs = body
            .prompt_logprobs
            .map(|k| logprob_count("prompt_logprobs", k))
            .transpose()?;
        // Echoed logprobs score the prompt with the same alternatives as the output.
        let echoed_logprobs = if echo { base.logprobs } else { None };
        base.prompt_logprobs = prompt_logprobs.max(echoed_logprobs);
        let mut requests = Vec::with_capacity(prompts.len() * n);
        for prompt in &prompts {
            check_prompt_len(prompt.len(), limits.max_model_len, prompt_param)?;
            for i in 0..n {
                let params = SamplingParams {
                    max_tokens: max_tokens.unwrap_or(limits.max_model_len - prompt.len()),
                    // Distinct but reproducible choices: the i-th sibling samples with seed + i.
                    seed: body.seed.map(|s| s.wrapping_add(i as i64) as u64),
                    ..base.clone()
                };
                let mut request = Request {
                    prompt: prompt.clone(),
                    params,
                    priority: body.priority.unwrap_or(0),
                    constraint: None,
                };
                limits.validate(&request)?;
                if max_tokens.is_none() {
                    // The cap applies after the check, which sees the rest of the context.
                    cap_max_tokens(&mut request.params, defaults.max_new_tokens);
                }
                requests.push(request);
            }
        }
        Ok(Self {
            prompt_lens: prompts.iter().map(Vec::len).collect(),
            n,
            requests,
            stop: stop_strings(body.stop.as_ref())?,
            // SGLang's `no_stop_trim` is the same request under another name.
            include_stop_str_in_output: body.include_stop_str_in_output.unwrap_or(false)
                || body.no_stop_trim.unwrap_or(false),
            skip_special_tokens: body.skip_special_tokens.unwrap_or(true),
            logprobs: base.logprobs,
            prompt_logprobs,
            echo,
            echoed: Vec::new(),
            tokens_as_ids: body.return_tokens_as_token_ids.unwrap_or(false),
            stream,
            include_usage: body
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            structured,
            tool_call_parser: None,
            parallel_tool_calls: true,
            tool_calls_only: false,
            reasoning: reasoning_delivery(body),
            chat_echo: None,
        })
    }
}

/// `separate_reasoning: false` keeps reasoning in the content; otherwise `include_reasoning:
/// false` drops it and `stream_reasoning: false` sends it whole.
fn reasoning_delivery(body: &GenerationRequest) -> Option<ReasoningDelivery> {
    if body.separate_reasoning == Some(false) {
        return None;
    }
    Some(match (body.include_reasoning, body.stream_reasoning) {
        (Some(false), _) => ReasoningDelivery::Dropped,
        (_, Some(false)) => ReasoningDelivery::Whole,
        _ => ReasoningDelivery::Stream,
    })
}

/// `max_completion_tokens` (the newer name) wins over `max_tokens`; `None` means "up to the context".
fn requested_max_tokens(body: &GenerationRequest) -> Result<Option<usize>, ApiError> {
    let (name, value) = match (body.max_completion_tokens, body.max_tokens) {
        (Some(v), _) => ("max_completion_tokens", v),
        (None, Some(v)) => ("max_tokens", v),
        (None, None) => return Ok(None),
    };
    if value < 1 {
        return Err(ApiError::bad_param(
            name,
            format!("`{name}` must be at least 1, got {value}"),
        ));
    }
    Ok(Some(value as usize))
}

/// Caps a reply that asked for no length at the file's `max_new_tokens`: the lower of it and
/// the rest of the context, as in vLLM.
fn cap_max_tokens(params: &mut SamplingParams, max_new_tokens: Option<usize>) {
    if let Some(cap) = max_new_tokens {
        params.max_tokens = params.max_tokens.min(cap);
        // A floor above the cap would make the cap unreachable; the cap is the file's word.
        params.min_tokens = params.min_tokens.min(cap);
    }
}

fn check_prompt_len(len: usize, max_model_len: usize, param: &str) -> Result<(), ApiError> {
    if len == 0 {
        return Err(ApiError::bad_param(param, "the prompt is empty"));
    }
    if len >= max_model_len {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_param(
                param,
                format!(
                    "the prompt has {len} tokens but this model's maximum context length is \
                     {max_model_len} tokens, leaving no room to generate"
                ),
            )
        });
    }
    Ok(())
}

/// Everything but `max_tokens` and `seed`, which differ per prompt and per choice. What the
/// request sets wins over the file's `defaults`.
fn sampling_params(
    body: &GenerationRequest,
    file: &GenerationConfig,
    endpoint: Endpoint,
    vocab_size: usize,
) -> Result<SamplingParams, ApiError> {
    let defaults = SamplingParams::default();
    let ignore_eos = body.ignore_eos.unwrap_or(false);
    let model_stops: &[u32] = if ignore_eos {
        &[]
    } else {
        &file.stop_token_ids
    };
    let min_tokens = match body.min_tokens.unwrap_or(0) {
        v if v < 0 => {
            return Err(ApiError::bad_param(
                "min_tokens",
                format!("`min_tokens` must be >= 0, got {v}"),
            ))
        }
        v => v as usize,
    };
    Ok(SamplingParams {
        temperature: body
            .temperature
            .or(file.temperature)
            .unwrap_or(defaults.temperature),
        top_k: top_k(body.top_k.or(file.top_k))?,
        top_p: body.top_p.or(file.top_p).unwrap_or(defaults.top_p),
        min_p: body.min_p.or(file.min_p).unwrap_or(defaults.min_p),
        seed: None,
        repetition_penalty: body
            .repetition_penalty
            .or(file.repetition_penalty)
            .unwrap_or(defaults.repetition_penalty),
        frequency_penalty: body.frequency_penalty.unwrap_or(defaults.frequency_penalty),
        presence_penalty: body.presence_penalty.unwrap_or(defaults.presence_penalty),
        max_tokens: defaults.max_tokens,
        min_tokens,
        // The model's other end-of-turn ids stop a reply as EOS does, and `ignore_eos` lifts
        // them with it (vLLM treats generation_config's EOS ids so).
        stop_token_ids: body
            .stop_token_ids
            .iter()
            .flatten()
            .copied()
            .chain(model_stops.iter().copied())
            .collect(),
        ignore_eos,
        logprobs: match endpoint {
            Endpoint::Completions => completion_logprobs(body.logprobs.as_ref())?,
            Endpoint::Chat => chat_logprobs(body.logprobs.as_ref(), body.top_logprobs)?,
        },
        prompt_logprobs: None,
        logit_bias: logit_bias(body.logit_bias.as_ref(), vocab_size)?,
        speculative: body.speculative.unwrap_or(true),
    })
}

/// Keys are token ids written as strings (JSON keys are strings), each inside the vocabulary.
fn logit_bias(
    value: Option<&BTreeMap<String, f32>>,
    vocab_size: usize,
) -> Result<LogitBias, ApiError> {
    let bad = |why: String| ApiError::bad_param("logit_bias", why);
    let entries = value
        .into_iter()
        .flatten()
        .map(|(key, &bias)| {
            let id: u32 = key
                .trim()
                .parse()
                .map_err(|_| bad(format!("`logit_bias` keys must be token ids, got `{key}`")))?;
            if id as usize >= vocab_size {
                return Err(bad(format!(
                    "`logit_bias` names token id {id}, outside the vocabulary (size {vocab_size})"
                )));
            }
            Ok((id, bias))
        })
        .collect::<Result<Vec<_>, _>>()?;
    LogitBias::new(entries).map_err(|e| bad(e.to_string()))
}

/// vLLM's convention: -1 (and 0) disable top-k.
fn top_k(value: Option<i64>) -> Result<Option<usize>, ApiError> {
    match value {
        None | Some(-1) | Some(0) => Ok(None),
        Some(k) if k > 0 => Ok(Some(k as usize)),
        Some(k) => Err(ApiError::bad_param(
            "top_k",
            format!("`top_k` must be -1 (disabled) or at least 1, got {k}"),
        )),
    }
}

fn logprob_count(param: &str, value: i64) -> Result<usize, ApiError> {
    if (0..=MAX_LOGPROBS as i64).contains(&value) {
        Ok(value as usize)
    } else {
        Err(ApiError::bad_param(
            param,
            format!("`{param}` must be between 0 and {MAX_LOGPROBS}, got {value}"),
        ))
    }
}

fn completion_logprobs(value: Option<&Value>) -> Result<Option<usize>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(k) => logprob_count("logprobs", k).map(Some),
            None => Err(ApiError::bad_param(
                "logprobs",
                "`logprobs` must be an integer (alternatives per token) for completions",
            )),
        },
    }
}

fn chat_logprobs(flag: Option<&Value>, top: Option<i64>) -> Result<Option<usize>, ApiError> {
    let wanted = match flag {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::bad_param(
                "logprobs",
                "`logprobs` must be true or false for chat completions",
            ))
        }
    };
    match (wanted, top) {
        (true, top) => logprob_count("top_logprobs", top.unwrap_or(0)).map(Some),
        (false, Some(t)) if t > 0 => Err(ApiError::bad_param(
            "top_logprobs",
            "`top_logprobs` needs `logprobs: true`",
        )),
        (false, _) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> EngineLimits {
        EngineLimits {
            vocab_size: 100,
            max_model_len: 64,
            num_kv_blocks: 64,
            block_size: 16,
            kv_capacity: tokenmill_engine::config::KvCapacity {
                num_pages: 64,
                short_context: 1024,
                one_sequence: 1024,
            },
            max_waiting: 8,
            eos_token_ids: vec![0],
        }
    }

    fn plan(body: Value, endpoint: Endpoint) -> Result<RequestPlan, ApiError> {
        let body: GenerationRequest = serde_json::from_value(body).unwrap();
        let rules = PlanRules {
            engine: &limits(),
            request_limits: &RequestLimits::default(),
            defaults: &GenerationConfig::default(),
        };
        RequestPlan::new(&body, endpoint, vec![vec![1, 2, 3]], &rules)
    }

    #[test]
    fn missing_max_tokens_means_the_rest_of_the_context() {
        let plan = plan(json!({}), Endpoint::Completions).unwrap();
        assert_eq!(plan.requests[0].params.max_tokens, 64 - 3);
    }

    #[test]
    fn max_completion_tokens_wins_over_max_tokens() {
        let plan = plan(
            json!({"max_tokens": 5, "max_completion_tokens": 7}),
            Endpoint::Chat,
        )
        .unwrap();
        assert_eq!(plan.requests[0].params.max_tokens, 7);
    }

    #[test]
    fn siblings_get_consecutive_seeds() {
        let plan = plan(json!({"n": 3, "seed": 10}), Endpoint::Completions).unwrap();
        let seeds: Vec<_> = plan.requests.iter().map(|r| r.params.seed).collect();
        assert_eq!(seeds, vec![Some(10), Some(11), Some(12)]);
    }

    #[test]
    fn out_of_range_values_name_their_parameter() {
        for (body, param) in [
            (json!({"n": 1000}), Some("n")),
            (json!({"n": 0}), Some("n")),
            (json!({"max_tokens": -1}), Some("max_tokens")),
            (json!({"top_k": -5}), Some("top_k")),
            (json!({"min_tokens": -1}), Some("min_tokens")),
            (json!({"logprobs": 21}), Some("logprobs")),
            (json!({"temperature": -1.0}), None),
            (json!({"top_p": 0.0}), None),
        ] {
            let error = plan(body.clone(), Endpoint::Completions).unwrap_err();
            assert_eq!(error.status, 400, "{body}");
            if param.is_some() {
                assert_eq!(error.param.as_deref(), param, "{body}");
            }
        }
    }

    #[test]
    fn chat_logprobs_is_a_flag_with_a_separate_count() {
        let on = plan(json!({"logprobs": true, "top_logprobs": 2}), Endpoint::Chat).unwrap();
        assert_eq!(on.logprobs, Some(2));
        assert!(plan(json!({"logprobs": 2}), Endpoint::Chat).is_err());
        assert!(plan(json!({"top_logprobs": 2}), Endpoint::Chat).is_err());
    }

    #[test]
    fn a_prompt_that_fills_the_context_is_refused() {
        let body = GenerationRequest::default();
        let rules = PlanRules {
            engine: &limits(),
            request_limits: &RequestLimits::default(),
            defaults: &GenerationConfig::default(),
        };
        let error =
            RequestPlan::new(&body, Endpoint::Completions, vec![vec![1; 64]], &rules).unwrap_err();
        assert_eq!(error.code, Some("context_length_exceeded"));
    }
}
