//! Typed reads of a GGUF header's metadata for the tokenizers: a missing or mistyped entry is a
//! `TokenizerError` that names its key, and the `tokenizer.ggml.token_type` values.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use crate::text::tokenizer_error::{Result, TokenizerError};

/// GGUF `tokenizer.ggml.token_type` values (SentencePiece's piece types, numbered from 1).
pub(crate) const TOKEN_TYPE_NORMAL: i64 = 1;
pub(crate) const TOKEN_TYPE_UNKNOWN: i64 = 2;
/// Control and user-defined tokens must match as a whole in raw text.
pub(crate) const TOKEN_TYPE_CONTROL: i64 = 3;
pub(crate) const TOKEN_TYPE_USER_DEFINED: i64 = 4;
pub(crate) const TOKEN_TYPE_BYTE: i64 = 6;

/// `tokenizer.ggml.token_type`, one per token, when the file has it.
pub(crate) fn token_types(
    metadata: &HashMap<String, Value>,
    tokens: &[&str],
) -> Result<Option<Vec<i64>>> {
    let Some(types) = metadata.get("tokenizer.ggml.token_type") else {
        return Ok(None);
    };
    let types = as_array(types, "tokenizer.ggml.token_type")?;
    if types.len() != tokens.len() {
        return Err(TokenizerError::TokenTypeCount {
            types: types.len(),
            tokens: tokens.len(),
        });
    }
    types
        .iter()
        .map(|value| as_integer(value, "tokenizer.ggml.token_type"))
        .collect::<Result<_>>()
        .map(Some)
}

fn type_name(value: &Value) -> String {
    format!("{:?}", value.value_type())
}

fn as_array<'a>(value: &'a Value, key: &str) -> Result<&'a [Value]> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(wrong_type(key, "an array", other)),
    }
}

fn as_integer(value: &Value, key: &str) -> Result<i64> {
    Ok(match value {
        Value::U8(v) => i64::from(*v),
        Value::I8(v) => i64::from(*v),
        Value::U16(v) => i64::from(*v),
        Value::I16(v) => i64::from(*v),
        Value::U32(v) => i64::from(*v),
        Value::I32(v) => i64::from(*v),
        Value::I64(v) => *v,
        Value::U64(v) => i64::try_from(*v).map_err(|_| wrong_type(key, "an integer", value))?,
        other => return Err(wrong_type(key, "an integer", other)),
    })
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> TokenizerError {
    TokenizerError::WrongType {
        key: key.to_owned(),
        expected,
        found: type_name(found),
    }
}

pub(crate) fn required_string<'a>(
    metadata: &'a HashMap<String, Value>,
    key: &'static str,
) -> Result<&'a str> {
    optional_string(metadata, key)?.ok_or(TokenizerError::MissingKey(key))
}

pub(crate) fn optional_string<'a>(
    metadata: &'a HashMap<String, Value>,
    key: &str,
) -> Result<Option<&'a str>> {
    match metadata.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(key, "a string", other)),
    }
}

pub(crate) fn optional_bool(metadata: &HashMap<String, Value>, key: &str) -> Result<Option<bool>> {
    match metadata.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong_type(key, "a boolean", other)),
    }
}

pub(crate) fn optional_u32(metadata: &HashMap<String, Value>, key: &str) -> Result<Option<u32>> {
    let Some(value) = metadata.get(key) else {
        return Ok(None);
    };
    let id = as_integer(value, key)?;
    u32::try_from(id)
        .map(Some)
        .map_err(|_| wrong_type(key, "a token id", value))
}

pub(crate) fn string_array<'a>(
    metadata: &'a HashMap<String, Value>,
    key: &'static str,
) -> Result<Vec<&'a str>> {
    typed_array(metadata, key, "an array of strings", |item| match item {
        Value::String(s) => Some(s.as_str()),
        _ => None,
    })
}

/// The array at `key`, each item read by `item` (`None`: not `expected`).
pub(crate) fn typed_array<'a, T>(
    metadata: &'a HashMap<String, Value>,
    key: &'static str,
    expected: &'static str,
    item: impl Fn(&'a Value) -> Option<T>,
) -> Result<Vec<T>> {
    let items = as_array(
        metadata.get(key).ok_or(TokenizerError::MissingKey(key))?,
        key,
    )?;
    items
        .iter()
        .map(|v| item(v).ok_or_else(|| wrong_type(key, expected, v)))
        .collect()
}
