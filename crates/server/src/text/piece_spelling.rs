//! `PieceSpelling`: how a vocabulary writes text in its pieces, so each id's bytes can be read
//! back for grammar constraints: GPT-2's byte-level alphabet, or SentencePiece's `▁` for a
//! space with `<0xHH>` pieces for single bytes.

use std::collections::HashMap;

use tokenizers::DecoderWrapper;

/// SentencePiece's space marker (U+2581).
const SPACE_MARKER: char = '▁';

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PieceSpelling {
    /// Every byte is one visible character (GPT-2, Llama 3, Qwen).
    ByteLevel,
    /// Text as it is, `▁` for a space, `<0xHH>` for a byte (Llama 2, Mistral, Gemma).
    SentencePiece {
        /// The unknown piece stands for no text (decoders write it as a marker).
        unknown: Option<u32>,
    },
}

impl PieceSpelling {
    /// A `tokenizer.json`'s spelling, read from its decoder: SentencePiece vocabularies decode
    /// with `Metaspace`, or with `ByteFallback` in a sequence that turns `▁` back into spaces.
    pub fn of_decoder(decoder: Option<&DecoderWrapper>, unknown: Option<u32>) -> Self {
        fn is_sentencepiece(decoder: &DecoderWrapper) -> bool {
            match decoder {
                DecoderWrapper::Metaspace(_) | DecoderWrapper::ByteFallback(_) => true,
                DecoderWrapper::Sequence(sequence) => {
                    sequence.get_decoders().iter().any(is_sentencepiece)
                }
                _ => false,
            }
        }
        match decoder {
            Some(decoder) if is_sentencepiece(decoder) => Self::SentencePiece { unknown },
            _ => Self::ByteLevel,
        }
    }

    /// The bytes piece `id` stands for, or `None` for a piece that is a marker, not text.
    pub fn bytes(&self, id: u32, piece: &str, byte_level: &HashMap<char, u8>) -> Option<Vec<u8>> {
        match self {
            Self::ByteLevel => piece.chars().map(|c| byte_level.get(&c).copied()).collect(),
            Self::SentencePiece { unknown } if *unknown == Some(id) => None,
            Self::SentencePiece { .. } => Some(match byte_piece(piece) {
                Some(byte) => vec![byte],
                None => piece.replace(SPACE_MARKER, " ").into_bytes(),
            }),
        }
    }
}

/// `<0xHH>`: byte fallback's piece for one byte.
fn byte_piece(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentencepiece_pieces_spell_spaces_bytes_and_text() {
        let spelling = PieceSpelling::SentencePiece { unknown: Some(3) };
        let none = HashMap::new();
        assert_eq!(spelling.bytes(10, "▁the", &none), Some(b" the".to_vec()));
        assert_eq!(spelling.bytes(11, "<0xC3>", &none), Some(vec![0xC3]));
        assert_eq!(
            spelling.bytes(12, "日本", &none),
            Some("日本".as_bytes().to_vec())
        );
        // Not a byte piece: three hex digits, or none.
        assert_eq!(spelling.bytes(13, "<0x>", &none), Some(b"<0x>".to_vec()));
        assert_eq!(spelling.bytes(3, "<unk>", &none), None);
    }
}
