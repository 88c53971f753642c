//! `ForwardBatch`: the plain data one forward pass needs, and nothing about requests. The
//! scheduler lays it out and the models and attention read it, so it sits below all three.

use crate::kv::block_manager::BlockId;
use crate::kv::block_table::BlockTable;
use std::ops::Range;

/// One flattened, mixed batch: prefill chunks and decode tokens of many sequences, laid
/// end to end. Models see this, never a `Sequence`.
#[derive(Debug, Clone, Default)]
pub struct ForwardBatch {
    /// `[T]` token ids, sequence after sequence.
    pub token_ids: Vec<u32>,
    /// `[T]` position of each token within its sequence.
    pub positions: Vec<usize>,
    /// `[groups][T]` KV-cache slot (`block * block_size + offset`) each token's key/value
    /// goes to in each KV cache group: a token has a page in every group.
    pub slots: Vec<Vec<usize>>,
    /// `[T]` index into `seqs` of each token's sequence.
    pub seq_index: Vec<usize>,
    pub seqs: Vec<BatchSeq>,
}

#[derive(Debug, Clone)]
pub struct BatchSeq {
    /// Rows of this sequence's tokens in the flattened batch.
    pub rows: Range<usize>,
    /// Per KV cache group, the blocks holding this sequence's positions, in order; a
    /// sliding group's blocks before its window are gone.
    pub block_tables: Vec<BlockTable>,
    /// Whether the last row's logits are wanted (the chunk reaches the sequence's end).
    pub sample: bool,
    /// Rows before the last that sample too: each verifies the draft token in the row after
    /// it. Zero without speculation.
    pub draft_rows: usize,
    /// Rows before the sampled one whose logits are wanted too (prompt logprobs); usually empty.
    pub prompt_logit_rows: Range<usize>,
    /// Rows whose final hidden states (after the output norm, before the output layer) are
    /// wanted: an embedding request's, which never samples. Usually empty.
    pub hidden_rows: Range<usize>,
}

impl ForwardBatch {
    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    /// Whether every sequence only decodes: one row that samples, or one per draft it
    /// verifies and one after them. Such a step's compute loops run at latency priority
    /// beside another model's prefill (`compute_pool::Priority`).
    pub fn is_decode_only(&self) -> bool {
        !self.seqs.is_empty()
            && self
                .seqs
                .iter()
                .all(|s| s.sample && s.rows.len() == s.draft_rows + 1)
    }

    /// Rows whose logits are computed, in `seqs` order: per sequence its prompt-logit rows,
    /// then its sampled rows (one, or one per verified draft and one after them). Written into `rows`, so a step's forward pass reuses the buffer.
    pub fn logit_rows_into(&self, rows: &mut Vec<usize>) {
        rows.clear();
        for s in &self.seqs {
            rows.extend(s.prompt_logit_rows.clone());
            if s.sample && !s.rows.is_empty() {
                rows.extend(s.rows.end - 1 - s.draft_rows..s.rows.end);
            }
        }
    }

    /// Rows whose logits are computed (see [`logit_rows_into`](Self::logit_rows_into)).
    pub fn logit_rows(&self) -> Vec<usize> {
        let mut rows = Vec::new();
        self.logit_rows_into(&mut rows);
        rows
    }

    /// Rows whose final hidden states are returned, in `seqs` order (see
    /// [`BatchSeq::hidden_rows`]). Written into `rows`, so a step reuses the buffer.
    pub fn hidden_rows_into(&self, rows: &mut Vec<usize>) {
        rows.clear();
        for s in &self.seqs {
            rows.extend(s.hidden_rows.clone());
        }
    }

    /// Returns the final hidden states of the last pushed sequence's rows `within` (offsets
    /// into its chunk) instead of logits: it must not sample.
    pub fn want_hidden(&mut self, within: Range<usize>) {
        if let Some(seq) = self.seqs.last_mut() {
            debug_assert!(!seq.sample && seq.prompt_logit_rows.is_empty());
            let first = seq.rows.start;
            seq.hidden_rows = first + within.start..first + within.end;
        }
    }

    /// Also computes logits for the last pushed sequence's rows `within` (offsets into its
    /// chunk), which must end before its sampled row.
    pub fn want_prompt_logits(&mut self, within: Range<usize>) {
        if let Some(seq) = self.seqs.last_mut() {
            let first = seq.rows.start;
            seq.prompt_logit_rows = first + within.start..first + within.end;
        }
    }

    /// Makes the last pushed sequence's final `1 + drafts` rows sample: its last token and
    /// the drafts after it, each row scoring the draft that follows.
    pub fn verify_drafts(&mut self, drafts: usize) {
        if let Some(seq) = self.seqs.last_mut() {
            debug_assert!(seq.sample && drafts < seq.rows.len());
            seq.draft_rows = drafts;
        }
    }

    /// Appends one sequence's chunk `tokens` starting at position `start`, with one block
    /// table for every layer (a cache of one group).
    pub fn push_seq(
        &mut self,
        tokens: &[u32],
        start: usize,
        block_table: &[BlockId],
        block_size: usize,
        sample: bool,
    ) {
        let tables = [BlockTable::new(block_table.to_vec())];
        self.push_chunk(tokens, start, &tables, block_size, sample);
    }

    /// Appends one sequence's chunk `tokens` starting at position `start`, with its table
    /// in each KV cache group; every table must hold the chunk's positions.
    pub fn push_chunk(
        &mut self,
        tokens: &[u32],
        start: usize,
        tables: &[BlockTable],
        block_size: usize,
        sample: bool,
    ) {
        let first = self.token_ids.len();
        let index = self.seqs.len();
        if self.slots.len() < tables.len() {
            self.slots.resize(tables.len(), Vec::new());
        }
        for (i, &tok) in tokens.iter().enumerate() {
            let pos = start + i;
            self.token_ids.push(tok);
            self.positions.push(pos);
            for (slots, table) in self.slots.iter_mut().zip(tables) {
                let block = table
                    .get(pos / block_size)
                    .expect("a chunk's positions have blocks in every group");
                slots.push(block.index() * block_size + pos % block_size);
            }
            self.seq_index.push(index);
        }
        self.seqs.push(BatchSeq {
            rows: first..self.token_ids.len(),
            block_tables: tables.to_vec(),
            sample,
            draft_rows: 0,
            prompt_logit_rows: first..first,
            hidden_rows: first..first,
        });
    }
}
