//! `GrammarTokenizer`: our tokenizer as llguidance sees it — a trie over every id's bytes.
//!
//! Built from our own vocabulary rather than `toktrie_hf_tokenizers`, which would pull a
//! second version of the `tokenizers` crate into the build.

use std::sync::Arc;

use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::text::tokenizer::{TokenBytes, Tokenizer};

pub struct GrammarTokenizer {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl GrammarTokenizer {
    /// `vocab_size` is the model's logit row length, which may exceed the tokenizer's (padded
    /// embeddings); the extra ids have no bytes, so no grammar ever allows them.
    /// `eos` is the id the grammar ends with; the caller maps the model's other EOS ids to it.
    pub fn new(tokenizer: Arc<Tokenizer>, vocab_size: usize, eos: u32) -> Self {
        let mut words: Vec<Vec<u8>> = tokenizer
            .token_bytes()
            .into_iter()
            .map(|bytes| match bytes {
                TokenBytes::Text(bytes) => bytes,
                // toktrie's convention: a leading 0xFF (never valid UTF-8) marks a special token.
                TokenBytes::Special(name) => {
                    let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    marked.extend_from_slice(name.as_bytes());
                    marked
                }
            })
            .collect();
        words.resize(vocab_size.max(words.len()), Vec::new());
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, &words);
        Self { tokenizer, trie }
    }

    pub fn vocab_size(&self) -> usize {
        self.trie.vocab_size()
    }
}

impl TokenizerEnv for GrammarTokenizer {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // The ids must spell exactly `s`, which an encoding need not: SentencePiece's dummy
        // prefix adds a space, a control token's text becomes an id with no text, and lossy
        // decoding changes bytes that are not UTF-8. Then the trie's greedy split, which
        // always spells `s`, stands in.
        match self.tokenizer.encode(&String::from_utf8_lossy(s), false) {
            Ok(ids) if self.trie.decode_ext(&ids, false) == s => ids,
            _ => self.trie.greedy_tokenize(s),
        }
    }
}
