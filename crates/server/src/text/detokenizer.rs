//! Streaming detokenization: turns generated ids into text deltas that are whole UTF-8 and stop at stop strings.

use std::sync::Arc;

use crate::text::tokenizer::{Result, Tokenizer};

/// What one pushed token produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// Text that is now safe to show; empty while characters or a possible stop string are held back.
    pub text: String,
    /// The stop string that ended the stream, if this token completed one; `text` ends just
    /// before it (or with it, when stop strings are included).
    pub stopped: Option<String>,
}

/// Decodes generated tokens one at a time.
///
/// Byte-level tokens can end in the middle of a UTF-8 character, so each step decodes a small window of
/// recent tokens and only advances once the window no longer ends in U+FFFD. Text that could be the
/// start of a stop string is held until the stop string is ruled out or confirmed.
pub struct IncrementalDetokenizer {
    tokenizer: Arc<Tokenizer>,
    skip_special_tokens: bool,
    stop: Vec<String>,
    ids: Vec<u32>,
    /// Start of the window whose decode is compared against; earlier ids are already emitted or context.
    prefix_offset: usize,
    /// Ids before this have been turned into text.
    read_offset: usize,
    /// Decoded text not yet emitted because it may begin a stop string.
    pending: String,
    stopped: bool,
    /// Keep a matched stop string at the end of the text instead of cutting before it.
    include_stop: bool,
}

impl IncrementalDetokenizer {
    /// `prompt_ids_tail` gives the decoder a few tokens of context (their text is never emitted);
    /// empty stop strings are ignored.
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        prompt_ids_tail: &[u32],
        stop: Vec<String>,
        skip_special_tokens: bool,
    ) -> Self {
        Self {
            tokenizer,
            skip_special_tokens,
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            ids: prompt_ids_tail.to_vec(),
            prefix_offset: 0,
            read_offset: prompt_ids_tail.len(),
            pending: String::new(),
            stopped: false,
            include_stop: false,
        }
    }

    /// Keeps a matched stop string in the text (vLLM's `include_stop_str_in_output`).
    pub fn including_stop_strings(self, include_stop: bool) -> Self {
        Self {
            include_stop,
            ..self
        }
    }

    /// True once a stop string has matched; later pushes produce nothing.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    pub fn push(&mut self, id: u32) -> Result<Step> {
        if self.stopped {
            return Ok(Step::default());
        }
        self.ids.push(id);
        let decoded = self.decode_new_complete_text()?;
        self.pending.push_str(&decoded);
        Ok(self.release_pending())
    }

    /// Emits everything still held back: characters left incomplete at the end (as U+FFFD, exactly as a
    /// full decode would show them) and text that turned out not to be a stop string.
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let tail = self.decode_window().unwrap_or_default();
        self.read_offset = self.ids.len();
        self.pending.push_str(&tail);
        if let Some((at, stop)) = self.earliest_stop() {
            self.pending.truncate(self.stop_cut(at, &stop));
            self.stopped = true;
        }
        std::mem::take(&mut self.pending)
    }

    /// Text of the ids after `read_offset`, or empty while it would end in a partial character.
    fn decode_new_complete_text(&mut self) -> Result<String> {
        let before = self.decode(self.prefix_offset, self.read_offset)?;
        let now = self.decode(self.prefix_offset, self.ids.len())?;
        if now.ends_with('\u{FFFD}') || now.len() <= before.len() {
            return Ok(String::new());
        }
        let Some(new_text) = now.get(before.len()..) else {
            // The window decodes differently once more bytes arrive; wait for a stable boundary.
            return Ok(String::new());
        };
        let new_text = new_text.to_owned();
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(new_text)
    }

    /// Whatever the unread ids decode to, ignoring whether it ends on a character boundary.
    fn decode_window(&self) -> Result<String> {
        let before = self.decode(self.prefix_offset, self.read_offset)?;
        let now = self.decode(self.prefix_offset, self.ids.len())?;
        Ok(match now.strip_prefix(before.as_str()) {
            Some(rest) => rest.to_owned(),
            None => self.decode(self.read_offset, self.ids.len())?,
        })
    }

    fn decode(&self, from: usize, to: usize) -> Result<String> {
        self.tokenizer
            .decode(&self.ids[from..to], self.skip_special_tokens)
    }

    /// Emits pending text up to a matched stop string, or all of it except a tail that may still grow into one.
    fn release_pending(&mut self) -> Step {
        if let Some((at, stop)) = self.earliest_stop() {
            self.pending.truncate(self.stop_cut(at, &stop));
            self.stopped = true;
            return Step {
                text: std::mem::take(&mut self.pending),
                stopped: Some(stop),
            };
        }
        let keep = self.longest_partial_stop_suffix();
        let rest = self.pending.split_off(self.pending.len() - keep);
        Step {
            text: std::mem::replace(&mut self.pending, rest),
            stopped: None,
        }
    }

    /// Where the text ends when `stop` matched at byte `at`.
    fn stop_cut(&self, at: usize, stop: &str) -> usize {
        if self.include_stop {
            at + stop.len()
        } else {
            at
        }
    }

    fn earliest_stop(&self) -> Option<(usize, String)> {
        self.stop
            .iter()
            .filter_map(|stop| self.pending.find(stop.as_str()).map(|at| (at, stop)))
            .min_by_key(|(at, _)| *at)
            .map(|(at, stop)| (at, stop.clone()))
    }

    /// Byte length of the longest end of `pending` that is the beginning of some stop string.
    fn longest_partial_stop_suffix(&self) -> usize {
        self.pending
            .char_indices()
            .map(|(at, _)| &self.pending[at..])
            .find(|tail| self.stop.iter().any(|stop| stop.starts_with(tail)))
            .map_or(0, str::len)
    }
}
