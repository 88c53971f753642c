//! SentencePiece BPE (GGUF `tokenizer.ggml.model = "llama"`, as Llama 2 and Mistral carry it) rebuilt as a `tokenizers` pipeline.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};

use crate::text::gguf_metadata::{
    optional_bool, optional_u32, typed_array, TOKEN_TYPE_BYTE, TOKEN_TYPE_NORMAL,
    TOKEN_TYPE_UNKNOWN,
};
use crate::text::tokenizer_error::{Result, TokenizerError};

/// SentencePiece's whitespace marker: spaces become it before BPE, and it becomes a space again in decoded text.
const SPACE_MARKER: &str = "\u{2581}";

/// The `tokenizer.ggml.*` entries of a SentencePiece BPE vocabulary.
///
/// The file has no merge list: SentencePiece merges two adjacent pieces whenever their concatenation is a
/// NORMAL piece of the vocabulary, the highest-scoring such pair first. A `tokenizers` BPE applies merges
/// by rank instead, so the merges are derived here from the scores: every split of a NORMAL piece into two
/// NORMAL pieces is a merge, ranked by the whole piece's score.
pub(crate) struct SentencePieceBpe<'a> {
    tokens: &'a [&'a str],
    scores: Vec<f32>,
    types: Vec<i64>,
    unk_token_id: u32,
    add_space_prefix: bool,
}

impl<'a> SentencePieceBpe<'a> {
    pub(crate) fn from_gguf_metadata(
        metadata: &'a HashMap<String, Value>,
        tokens: &'a [&'a str],
        types: Vec<i64>,
    ) -> Result<Self> {
        let scores = float_array(metadata, "tokenizer.ggml.scores")?;
        if scores.len() != tokens.len() {
            return Err(TokenizerError::Build(format!(
                "tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}",
                scores.len(),
                tokens.len()
            )));
        }
        // A vocabulary trained with extra whitespace removal would need that normalization too;
        // encoding without it would give plausible but wrong ids.
        if optional_bool(metadata, "tokenizer.ggml.remove_extra_whitespaces")? == Some(true) {
            return Err(TokenizerError::Build(
                "tokenizer.ggml.remove_extra_whitespaces = true is not supported".to_owned(),
            ));
        }
        let unk_token_id = match optional_u32(metadata, "tokenizer.ggml.unknown_token_id")? {
            Some(id) => id,
            None => types
                .iter()
                .position(|&t| t == TOKEN_TYPE_UNKNOWN)
                .map(|id| id as u32)
                .ok_or(TokenizerError::MissingKey(
                    "tokenizer.ggml.unknown_token_id",
                ))?,
        };
        if unk_token_id as usize >= tokens.len() {
            return Err(TokenizerError::Build(format!(
                "tokenizer.ggml.unknown_token_id {unk_token_id} is outside the {} tokens",
                tokens.len()
            )));
        }
        Ok(Self {
            tokens,
            scores,
            types,
            unk_token_id,
            // llama.cpp's default for this model: SentencePiece's `add_dummy_prefix`, on in every Llama vocabulary.
            add_space_prefix: optional_bool(metadata, "tokenizer.ggml.add_space_prefix")?
                .unwrap_or(true),
        })
    }

    pub(crate) fn unk_token_id(&self) -> u32 {
        self.unk_token_id
    }

    /// The encoder and decoder; control and user-defined tokens are registered by the caller, as for every model.
    pub(crate) fn build(self) -> Result<tokenizers::Tokenizer> {
        let vocab: Vocab = self
            .tokens
            .iter()
            .enumerate()
            .map(|(id, token)| (token.to_string(), id as u32))
            .collect();
        let has_byte_tokens = self.types.contains(&TOKEN_TYPE_BYTE);
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, self.merges())
            .unk_token(self.tokens[self.unk_token_id as usize].to_owned())
            // SentencePiece emits one unknown id for a run of unknown characters.
            .fuse_unk(true)
            .byte_fallback(has_byte_tokens)
            .build()
            .map_err(|e| TokenizerError::Build(e.to_string()))?;

        let mut inner = tokenizers::Tokenizer::new(bpe);
        let replace_spaces = Replace::new(" ", SPACE_MARKER).map_err(build_error)?;
        let normalizer = if self.add_space_prefix {
            // `Prepend` leaves empty text empty, as SentencePiece does; text after a special token gets its
            // own prefix, as llama.cpp gives it.
            NormalizerSequence::new(vec![
                Prepend::new(SPACE_MARKER.to_owned()).into(),
                replace_spaces.into(),
            ])
        } else {
            NormalizerSequence::new(vec![replace_spaces.into()])
        };
        inner
            .with_normalizer(Some(normalizer))
            .map_err(build_error)?;

        let mut decoders: Vec<DecoderWrapper> = vec![
            Replace::new(SPACE_MARKER, " ").map_err(build_error)?.into(),
            ByteFallback::new().into(),
            Fuse::new().into(),
        ];
        if self.add_space_prefix {
            // After `Fuse` the text is one piece, so this removes only the prefix the encoder added.
            decoders.push(Strip::new(' ', 1, 0).into());
        }
        inner.with_decoder(Some(DecoderSequence::new(decoders)));
        Ok(inner)
    }

    /// Every `(left, right)` whose concatenation is a NORMAL piece, both halves NORMAL too, best score first.
    ///
    /// Byte, control and unused pieces are never the result of a SentencePiece merge, and user-defined
    /// ones are matched whole before BPE runs, so only NORMAL pieces take part. SentencePiece breaks a tie
    /// between equal scores by position (leftmost first), which a ranked list cannot express. Trained
    /// vocabularies give every piece its own score, so the only ties left are two splits of one piece
    /// open at once in overlapping places (`a|aa|a` for `aaa`), which BPE's own merge order makes all
    /// but unreachable; ties go to the lower id, then the earlier split.
    fn merges(&self) -> Vec<(String, String)> {
        let normal: HashMap<&str, usize> = self
            .tokens
            .iter()
            .enumerate()
            .filter(|&(id, _)| self.types[id] == TOKEN_TYPE_NORMAL)
            .map(|(id, &token)| (token, id))
            .collect();
        let mut ranked: Vec<(f32, usize, usize)> = Vec::new();
        for (&piece, &id) in &normal {
            for (split, _) in piece.char_indices().skip(1) {
                let (left, right) = piece.split_at(split);
                if normal.contains_key(left) && normal.contains_key(right) {
                    ranked.push((self.scores[id], id, split));
                }
            }
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        ranked
            .into_iter()
            .map(|(_, id, split)| {
                let (left, right) = self.tokens[id].split_at(split);
                (left.to_owned(), right.to_owned())
            })
            .collect()
    }
}

fn build_error(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Build(e.to_string())
}

fn float_array(metadata: &HashMap<String, Value>, key: &'static str) -> Result<Vec<f32>> {
    typed_array(metadata, key, "an array of floats", |item| match item {
        Value::F32(v) => Some(*v),
        Value::F64(v) => Some(*v as f32),
        _ => None,
    })
}
