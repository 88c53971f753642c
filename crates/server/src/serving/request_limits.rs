//! `RequestLimits`: how much work one API request may ask for — prompts, choices, stop
//! strings and stop ids, JSON nesting, body size and the time its body may take — each checked
//! before any tokenizing or queueing, and each refusal (400, 408, 413) names the limit and the
//! flag that raises it.

use clap::Args;

use crate::api::api_error::ApiError;
use crate::api::generation_request::GenerationRequest;

#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most prompts one completions request may carry (and inputs one embeddings request).
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_prompts_per_request)]
    pub max_prompts_per_request: usize,
    /// Largest `n` (choices per prompt).
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_n)]
    pub max_n: usize,
    /// Most choices (prompts × n) one request may ask for; each is a full engine request.
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_choices_per_request)]
    pub max_choices_per_request: usize,
    /// Most stop strings per request (each is matched against every piece of output text).
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_stop_strings)]
    pub max_stop_strings: usize,
    /// Longest stop string, in bytes.
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_stop_string_bytes)]
    pub max_stop_string_bytes: usize,
    /// Most `stop_token_ids` per request.
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_stop_token_ids)]
    pub max_stop_token_ids: usize,
    /// Deepest JSON nesting a request body may have.
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_json_depth)]
    pub max_json_depth: usize,
    /// Seconds a client may take to send its request body (408 after that), so half-sent
    /// bodies cannot hold connections open forever.
    #[arg(
        long,
        default_value_t = RequestLimits::DEFAULT.request_body_timeout,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub request_body_timeout: u64,
    /// Largest request body, in bytes (413 above it). A body announced larger by its
    /// Content-Length is refused before any of it is read, without `100 Continue`.
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_request_body_bytes)]
    pub max_request_body_bytes: usize,
    /// Most Responses API replies kept in memory for `previous_response_id` and `GET
    /// /v1/responses/{id}` (`store`); past it the oldest is evicted. 0 stores none.
    #[arg(long, default_value_t = RequestLimits::DEFAULT.max_stored_responses)]
    pub max_stored_responses: usize,
}

impl RequestLimits {
    /// Every default, stated once: `Default` and the flags' defaults read it.
    pub const DEFAULT: Self = Self {
        max_prompts_per_request: 256,
        max_n: 16,
        max_choices_per_request: 256,
        max_stop_strings: 16,
        max_stop_string_bytes: 256,
        max_stop_token_ids: 256,
        max_json_depth: 64,
        request_body_timeout: 30,
        max_request_body_bytes: 8 << 20,
        max_stored_responses: 1000,
    };
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A 400 naming the parameter, the limit and the flag.
fn over(param: &str, what: String, limit: usize, flag: &str) -> ApiError {
    ApiError {
        code: Some("limit_exceeded"),
        ..ApiError::bad_param(
            param,
            format!("{what}; the limit is {limit} (the server's --{flag})"),
        )
    }
}

impl RequestLimits {
    /// Checks the request's shape against the limits; `prompts` is how many prompts it holds.
    pub fn check(&self, body: &GenerationRequest, prompts: usize) -> Result<(), ApiError> {
        self.check_inputs("prompt", prompts)?;
        let n = self.choices_per_prompt(body.n)?;
        if prompts * n > self.max_choices_per_request {
            return Err(over(
                "n",
                format!(
                    "{prompts} prompts × n = {n} ask for {} choices",
                    prompts * n
                ),
                self.max_choices_per_request,
                "max-choices-per-request",
            ));
        }
        self.check_stops(body)
    }

    /// How many prompts (or embedding inputs) the field `param` holds, against
    /// `--max-prompts-per-request`.
    pub fn check_inputs(&self, param: &str, count: usize) -> Result<(), ApiError> {
        if count > self.max_prompts_per_request {
            return Err(over(
                param,
                format!("the request holds {count} {param}s"),
                self.max_prompts_per_request,
                "max-prompts-per-request",
            ));
        }
        Ok(())
    }

    /// `n`, checked to lie in `1..=max_n`.
    pub fn choices_per_prompt(&self, n: Option<i64>) -> Result<usize, ApiError> {
        let n = n.unwrap_or(1);
        match usize::try_from(n) {
            Ok(n) if (1..=self.max_n).contains(&n) => Ok(n),
            _ => Err(over(
                "n",
                format!("`n` must be at least 1 and at most {}, got {n}", self.max_n),
                self.max_n,
                "max-n",
            )),
        }
    }

    fn check_stops(&self, body: &GenerationRequest) -> Result<(), ApiError> {
        let stops = crate::api::generation_request::stop_strings(body.stop.as_ref())?;
        if stops.len() > self.max_stop_strings {
            return Err(over(
                "stop",
                format!("`stop` holds {} strings", stops.len()),
                self.max_stop_strings,
                "max-stop-strings",
            ));
        }
        if let Some(long) = stops.iter().find(|s| s.len() > self.max_stop_string_bytes) {
            return Err(over(
                "stop",
                format!("a stop string is {} bytes long", long.len()),
                self.max_stop_string_bytes,
                "max-stop-string-bytes",
            ));
        }
        let ids = body.stop_token_ids.as_ref().map_or(0, Vec::len);
        if ids > self.max_stop_token_ids {
            return Err(over(
                "stop_token_ids",
                format!("`stop_token_ids` holds {ids} ids"),
                self.max_stop_token_ids,
                "max-stop-token-ids",
            ));
        }
        Ok(())
    }

    /// Refuses a body nested deeper than `max_json_depth`, before it is parsed: parsing
    /// (and ignoring) deep nesting costs time and stack whatever the field.
    pub fn check_json_depth(&self, body: &[u8]) -> Result<(), ApiError> {
        let depth = json_depth(body, self.max_json_depth + 1);
        if depth > self.max_json_depth {
            return Err(ApiError {
                code: Some("limit_exceeded"),
                ..ApiError::bad_request(format!(
                    "the request body nests JSON more than {} levels deep (the server's \
                     --max-json-depth)",
                    self.max_json_depth
                ))
            });
        }
        Ok(())
    }
}

/// The deepest nesting of arrays and objects in `bytes`, counted up to `stop_at`; brackets
/// inside strings do not count. Linear in the input and never recursive.
pub fn json_depth(bytes: &[u8], stop_at: usize) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest >= stop_at {
                    return deepest;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_inside_strings_do_not_count_as_nesting() {
        assert_eq!(json_depth(br#"{"a": "[[[{{{", "b": [1, [2]]}"#, 100), 3);
        assert_eq!(json_depth(br#"{"a": "\"[[["}"#, 100), 1);
        assert_eq!(json_depth(b"1", 100), 0);
    }

    #[test]
    fn counting_stops_at_the_limit() {
        let deep = "[".repeat(100_000);
        assert_eq!(json_depth(deep.as_bytes(), 65), 65);
    }
}
