//! Text ↔ token ids: byte-level BPE or SentencePiece BPE built from GGUF metadata, or a Hugging Face `tokenizer.json`.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};

use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{
    AddedToken, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
    SplitDelimiterBehavior,
};

use crate::text::gguf_metadata::{
    optional_bool, optional_string, optional_u32, required_string, string_array, token_types,
    TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED,
};
use crate::text::piece_spelling::PieceSpelling;
use crate::text::sentencepiece_bpe::SentencePieceBpe;
pub use crate::text::tokenizer_error::{Result, TokenizerError};

/// Llama 3's split pattern: letters may carry one leading non-letter, numbers come in runs of up to three digits.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split pattern: like Llama 3's but every digit stands alone.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer plus the BOS/EOS ids the model was trained with.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos_token_id: Option<u32>,
    eos_token_id: Option<u32>,
    /// GGUF tokenizers have no post-processor, so BOS is added here when the metadata asks for it;
    /// a `tokenizer.json` carries its own post-processor and leaves this false.
    prepend_bos: bool,
    /// Likewise EOS at the end, for the rare file whose `tokenizer.ggml.add_eos_token` asks for it.
    append_eos: bool,
    /// How pieces write text, for reading each id's bytes back.
    spelling: PieceSpelling,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_id", &self.eos_token_id)
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer that the `tokenizer.ggml.*` entries of a GGUF file describe: `gpt2` (byte-level
    /// BPE with a merge list) or `llama` (SentencePiece BPE with scores and byte fallback).
    ///
    /// An unknown `tokenizer.ggml.pre` is an error rather than a silent GPT-2 fallback, because a wrong
    /// split regex produces plausible but wrong ids. A missing `tokenizer.ggml.pre` means GPT-2.
    pub fn from_gguf_metadata(metadata: &HashMap<String, Value>) -> Result<Self> {
        let model = required_string(metadata, "tokenizer.ggml.model")?;
        let tokens = string_array(metadata, "tokenizer.ggml.tokens")?;
        let types = token_types(metadata, &tokens)?;
        let (mut inner, default_add_bos, spelling) = match model {
            "gpt2" => (
                byte_level_bpe(metadata, &tokens)?,
                false,
                PieceSpelling::ByteLevel,
            ),
            // llama.cpp adds BOS for this model unless the file says otherwise.
            "llama" => {
                let types = types
                    .clone()
                    .ok_or(TokenizerError::MissingKey("tokenizer.ggml.token_type"))?;
                let spm = SentencePieceBpe::from_gguf_metadata(metadata, &tokens, types)?;
                let spelling = PieceSpelling::SentencePiece {
                    unknown: Some(spm.unk_token_id()),
                };
                (spm.build()?, true, spelling)
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        if let Some(types) = &types {
            add_whole_match_tokens(&mut inner, types, &tokens)?;
        }
        Ok(Self {
            inner,
            bos_token_id: optional_u32(metadata, "tokenizer.ggml.bos_token_id")?,
            eos_token_id: optional_u32(metadata, "tokenizer.ggml.eos_token_id")?,
            prepend_bos: optional_bool(metadata, "tokenizer.ggml.add_bos_token")?
                .unwrap_or(default_add_bos),
            append_eos: optional_bool(metadata, "tokenizer.ggml.add_eos_token")?.unwrap_or(false),
            spelling,
        })
    }

    /// Loads a Hugging Face `tokenizer.json`; BOS/EOS stay unknown (see [`Tokenizer::from_hf_dir`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| TokenizerError::Load {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let unknown = match inner.get_model() {
            tokenizers::ModelWrapper::BPE(bpe) => bpe
                .get_unk_token()
                .as_deref()
                .and_then(|unk| inner.token_to_id(unk)),
            _ => None,
        };
        let spelling = PieceSpelling::of_decoder(inner.get_decoder(), unknown);
        Ok(Self {
            inner,
            bos_token_id: None,
            eos_token_id: None,
            prepend_bos: false,
            append_eos: false,
            spelling,
        })
    }

    /// Loads `dir/tokenizer.json`, taking BOS/EOS from `dir/tokenizer_config.json` when that file exists.
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let mut tokenizer = Self::from_file(dir.join("tokenizer.json"))?;
        if let Some(config) = read_hf_config(dir)? {
            tokenizer.bos_token_id = config_token_id(&tokenizer, &config, "bos_token");
            tokenizer.eos_token_id = config_token_id(&tokenizer, &config, "eos_token");
        }
        Ok(tokenizer)
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 2);
        if add_special_tokens && self.prepend_bos {
            ids.extend(self.bos_token_id);
        }
        ids.extend_from_slice(encoding.get_ids());
        if add_special_tokens && self.append_eos {
            ids.extend(self.eos_token_id);
        }
        Ok(ids)
    }

    /// Decodes ids to text; bytes that do not form complete UTF-8 come out as U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// Splits text the way the pre-tokenizer does before BPE runs, returning slices of the original text.
    pub fn pre_tokenize(&self, text: &str) -> Result<Vec<String>> {
        let mut pieces = PreTokenizedString::from(text);
        if let Some(pre) = self.inner.get_pre_tokenizer() {
            pre.pre_tokenize(&mut pieces)
                .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        }
        Ok(pieces
            .get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(_, (start, end), _)| text[start..end].to_owned())
            .collect())
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos_token_id
    }

    /// Number of ids, counting added tokens that lie outside the base vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The id of `content` when the vocabulary holds it as a control (special) token.
    pub fn control_token_id(&self, content: &str) -> Option<u32> {
        self.inner
            .get_added_tokens_decoder()
            .into_iter()
            .find(|(_, token)| token.special && token.content == content)
            .map(|(id, _)| id)
    }

    /// What each id adds to the text, indexed by id (ids the tokenizer lacks are empty text).
    /// Grammar constraints need raw bytes: a byte-level piece can hold half a character.
    pub fn token_bytes(&self) -> Vec<TokenBytes> {
        let added = self.inner.get_added_tokens_decoder();
        let byte_of = byte_level_decoder();
        (0..self.vocab_size() as u32)
            .map(|id| match (added.get(&id), self.inner.id_to_token(id)) {
                (Some(token), _) if token.special => TokenBytes::Special(token.content.clone()),
                (Some(token), _) => TokenBytes::Text(token.content.clone().into_bytes()),
                (None, Some(piece)) => self
                    .spelling
                    .bytes(id, &piece, &byte_of)
                    // A piece outside the vocabulary's alphabet is a marker, not text.
                    .map_or(TokenBytes::Special(piece), TokenBytes::Text),
                (None, None) => TokenBytes::Text(Vec::new()),
            })
            .collect()
    }
}

/// One token's contribution to the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenBytes {
    Text(Vec<u8>),
    /// A control token (`<|im_end|>`): never produced by text, only by the model.
    Special(String),
}

/// GPT-2's byte-level alphabet reversed: printable Latin-1 bytes stand for themselves, and the
/// other 68 bytes were moved, in order, to U+0100 onwards so every byte is a visible character.
fn byte_level_decoder() -> HashMap<char, u8> {
    let mut moved = 0u32;
    (0..=255u8)
        .map(|b| {
            let visible = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let c = if visible {
                char::from(b)
            } else {
                moved += 1;
                char::from_u32(0x100 + moved - 1).unwrap_or(char::REPLACEMENT_CHARACTER)
            };
            (c, b)
        })
        .collect()
}

/// Reads a GGUF file's header and returns its tokenizer and chat template (if it has one).
pub fn from_gguf_file(path: &Path) -> Result<(Tokenizer, Option<String>)> {
    let metadata = read_gguf_metadata(path)?;
    let tokenizer = Tokenizer::from_gguf_metadata(&metadata)?;
    Ok((tokenizer, gguf_chat_template(&metadata)?))
}

/// A GGUF file's chat template alone, for when another tokenizer replaces the file's own
/// (whose vocabulary is then never built, so it cannot stand in the way).
pub fn gguf_file_chat_template(path: &Path) -> Result<Option<String>> {
    gguf_chat_template(&read_gguf_metadata(path)?)
}

fn read_gguf_metadata(path: &Path) -> Result<HashMap<String, Value>> {
    let file = File::open(path).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })?;
    let content =
        gguf_file::Content::read(&mut BufReader::new(file)).map_err(|e| TokenizerError::Gguf {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    Ok(content.metadata)
}

/// A tokenizer named by path, with the chat template that comes with it: a GGUF file's
/// metadata, a Hugging Face folder (`tokenizer.json` and `tokenizer_config.json`), or a
/// `tokenizer.json` file alone (which has no template).
pub fn from_path(path: &Path) -> Result<(Tokenizer, Option<String>)> {
    if path.is_dir() {
        let tokenizer = Tokenizer::from_hf_dir(path)?;
        return Ok((tokenizer, hf_chat_template(path)?));
    }
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return from_gguf_file(path);
    }
    Ok((Tokenizer::from_file(path)?, None))
}

/// The Jinja chat template stored under `tokenizer.chat_template`, if any.
pub fn gguf_chat_template(metadata: &HashMap<String, Value>) -> Result<Option<String>> {
    Ok(optional_string(metadata, "tokenizer.chat_template")?.map(str::to_owned))
}

/// The `chat_template` of `dir/tokenizer_config.json`; when it lists several named templates, the `default` one.
pub fn hf_chat_template(dir: impl AsRef<Path>) -> Result<Option<String>> {
    let Some(config) = read_hf_config(dir.as_ref())? else {
        return Ok(None);
    };
    Ok(match config.get("chat_template") {
        Some(serde_json::Value::String(template)) => Some(template.clone()),
        Some(serde_json::Value::Array(named)) => named
            .iter()
            .find(|entry| entry.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|entry| entry.get("template")?.as_str().map(str::to_owned)),
        _ => None,
    })
}

/// GPT-2-style byte-level BPE: the merge list is in the file, and `tokenizer.ggml.pre` names the split regex.
fn byte_level_bpe(
    metadata: &HashMap<String, Value>,
    tokens: &[&str],
) -> Result<tokenizers::Tokenizer> {
    let pre = optional_string(metadata, "tokenizer.ggml.pre")?.unwrap_or("default");
    let merges = parse_merges(&string_array(metadata, "tokenizer.ggml.merges")?)?;
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.to_string(), id as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre == "llama-bpe")
        .build()
        .map_err(|e| TokenizerError::Build(e.to_string()))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(pre_tokenizer_for(pre)?));
    inner.with_decoder(Some(ByteLevel::default()));
    Ok(inner)
}

fn pre_tokenizer_for(name: &str) -> Result<PreTokenizerWrapper> {
    let gpt2_byte_level = || ByteLevel::new(false, true, true).into();
    let split_then_bytes = |pattern: &str| -> Result<PreTokenizerWrapper> {
        let split = Split::new(
            SplitPattern::Regex(pattern.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| TokenizerError::Build(format!("split regex for `{name}`: {e}")))?;
        // The split above already did GPT-2's job, so byte-level must not apply its own regex on top.
        let bytes = ByteLevel::new(false, true, false);
        Ok(Sequence::new(vec![split.into(), bytes.into()]).into())
    };
    match name {
        "default" | "gpt2" | "gpt-2" => Ok(gpt2_byte_level()),
        "smollm" => Ok(Sequence::new(vec![Digits::new(true).into(), gpt2_byte_level()]).into()),
        "llama-bpe" => split_then_bytes(LLAMA3_SPLIT),
        "qwen2" => split_then_bytes(QWEN2_SPLIT),
        other => Err(TokenizerError::UnknownPreTokenizer(other.to_owned())),
    }
}

/// Registers control and user-defined tokens so their text encodes to the single id instead of being split by BPE.
/// Control tokens are special (dropped by `skip_special_tokens`); user-defined ones are kept in decoded text.
fn add_whole_match_tokens(
    inner: &mut tokenizers::Tokenizer,
    types: &[i64],
    tokens: &[&str],
) -> Result<()> {
    let mut special = Vec::new();
    let mut user_defined = Vec::new();
    for (&kind, token) in types.iter().zip(tokens) {
        match kind {
            TOKEN_TYPE_CONTROL => special.push(AddedToken::from(*token, true)),
            TOKEN_TYPE_USER_DEFINED => {
                user_defined.push(AddedToken::from(*token, false).normalized(false))
            }
            _ => {}
        }
    }
    inner
        .add_special_tokens(special)
        .map_err(|e| TokenizerError::Build(e.to_string()))?;
    inner
        .add_tokens(user_defined)
        .map_err(|e| TokenizerError::Build(e.to_string()))?;
    Ok(())
}

fn parse_merges(merges: &[&str]) -> Result<Vec<(String, String)>> {
    merges
        .iter()
        .enumerate()
        .map(|(index, merge)| {
            merge
                .split_once(' ')
                .filter(|(left, right)| !left.is_empty() && !right.is_empty())
                .map(|(left, right)| (left.to_owned(), right.to_owned()))
                .ok_or_else(|| TokenizerError::BadMerge {
                    index,
                    merge: (*merge).to_owned(),
                })
        })
        .collect()
}

fn read_hf_config(dir: &Path) -> Result<Option<serde_json::Value>> {
    let path = dir.join("tokenizer_config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(TokenizerError::Io { path, source }),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|source| TokenizerError::Json { path, source })
}

/// `tokenizer_config.json` writes a token either as a bare string or as `{"content": "..."}`.
fn config_token_id(tokenizer: &Tokenizer, config: &serde_json::Value, key: &str) -> Option<u32> {
    let entry = config.get(key)?;
    let text = entry.as_str().or_else(|| entry.get("content")?.as_str())?;
    tokenizer.token_to_id(text)
}
