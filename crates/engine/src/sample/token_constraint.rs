//! `TokenConstraint`: a per-request rule over token ids (a grammar, a schema, a regex) that
//! says which tokens may come next; the sampler masks every other token out.
//!
//! The engine never sees the rule's text: the server compiles it into an implementation of
//! this trait and hands it over with the request. Its state follows the request's accepted
//! output tokens only, so recomputing a preempted sequence or serving its prompt from the
//! prefix cache leaves it untouched.

use crate::sample::mask_worker::MaskWorker;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Mutex, PoisonError};

/// Which token ids may be sampled next: one bit per id of the model's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
    len: usize,
}

impl TokenMask {
    /// A mask over `len` ids with none allowed.
    pub fn new(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(32)],
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forbids every id, so a mask can be refilled without reallocating.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    pub fn allow(&mut self, id: u32) {
        if (id as usize) < self.len {
            self.words[id as usize / 32] |= 1 << (id % 32);
        }
    }

    pub fn is_allowed(&self, id: u32) -> bool {
        (id as usize) < self.len && self.words[id as usize / 32] & (1 << (id % 32)) != 0
    }

    /// The bits, 32 ids per word, lowest id in the lowest bit: the layout llguidance and
    /// other bitset producers share, so a producer can copy its words straight in.
    pub fn words_mut(&mut self) -> &mut [u32] {
        &mut self.words
    }

    pub fn count_allowed(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Sets the logit of every forbidden id to −∞. Rows longer than the mask (a padded
    /// vocabulary) lose their tail too: ids no tokenizer knows are never allowed.
    pub fn apply(&self, logits: &mut [f32]) {
        for (i, l) in logits.iter_mut().enumerate() {
            if !self.is_allowed(i as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// Why a constraint could not go on; the request ends with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("constrained decoding failed: {0}")]
pub struct ConstraintError(pub String);

/// A token-level rule the sampler enforces for one sequence.
pub trait TokenConstraint: Send {
    /// Fills `mask` (all forbidden on entry) with the tokens allowed next. When the rule is
    /// complete the mask allows only end-of-sequence tokens.
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<(), ConstraintError>;

    /// Advances past `token`, which the last mask allowed.
    fn accept(&mut self, token: u32) -> Result<(), ConstraintError>;

    /// The rule is complete and allows nothing more: the sequence stops here, even where
    /// `ignore_eos` or `min_tokens` would otherwise go on.
    fn is_finished(&self) -> bool;

    /// An independent copy in the same state (each choice of `n` needs its own).
    fn boxed_clone(&self) -> Box<dyn TokenConstraint>;
}

/// A constraint with its mask buffer, owned by one request and then its sequence.
///
/// The sampler runs rows in parallel from a shared borrow of the scheduler, so the state
/// sits behind a mutex that only its own row ever takes: it is never contended.
///
/// After an accepted token the next mask can be computed ahead on the [`MaskWorker`] while
/// the next forward pass runs; the next sample collects it. The constraint's state only
/// moves on `accept`, so the mask computed ahead is the one sampling would compute.
pub struct ConstraintCell {
    inner: Mutex<CellState>,
}

struct CellState {
    /// `None` while the constraint is away on the mask worker.
    constraint: Option<Box<dyn TokenConstraint>>,
    mask: TokenMask,
    /// The mask being computed ahead, and what it will bring back.
    ahead: Option<Receiver<Ahead>>,
    /// `mask` already holds the allowed tokens for the next sample.
    mask_ready: Option<Result<(), ConstraintError>>,
    finished: bool,
}

fn lost() -> ConstraintError {
    ConstraintError("the constraint was lost".into())
}

/// A constraint and its mask back from the worker, filled (or failed).
struct Ahead {
    constraint: Box<dyn TokenConstraint>,
    mask: TokenMask,
    filled: Result<(), ConstraintError>,
}

impl CellState {
    /// Waits for a mask computed ahead and takes the constraint back.
    fn settle(&mut self) -> Result<&mut Box<dyn TokenConstraint>, ConstraintError> {
        if let Some(rx) = self.ahead.take() {
            let back = rx
                .recv()
                .map_err(|_| ConstraintError("the token mask computation panicked".into()))?;
            self.constraint = Some(back.constraint);
            self.mask = back.mask;
            self.mask_ready = Some(back.filled);
        }
        self.constraint.as_mut().ok_or_else(lost)
    }

    /// Sends the constraint and mask to the worker to fill the next mask; keeps them (the
    /// next sample fills the mask itself) where no worker runs.
    fn compute_ahead(&mut self) {
        let (Some(worker), Some(constraint)) = (MaskWorker::get(), self.constraint.take()) else {
            return;
        };
        let mut mask = std::mem::replace(&mut self.mask, TokenMask::new(0));
        let (tx, rx) = sync_channel(1);
        let job = Box::new(move || {
            let mut constraint = constraint;
            mask.clear();
            let filled = constraint.fill_mask(&mut mask);
            let _ = tx.send(Ahead {
                constraint,
                mask,
                filled,
            });
        });
        if let Err(job) = worker.submit(job) {
            job();
        }
        self.ahead = Some(rx);
    }
}

impl ConstraintCell {
    pub fn new(constraint: Box<dyn TokenConstraint>) -> Self {
        let finished = constraint.is_finished();
        Self {
            inner: Mutex::new(CellState {
                constraint: Some(constraint),
                mask: TokenMask::new(0),
                ahead: None,
                mask_ready: None,
                finished,
            }),
        }
    }

    /// Computes the mask over `vocab_size` ids (or collects the one computed ahead), lets
    /// `sample` pick a token under it, then advances the constraint past that token. With
    /// `ahead`, the next mask is then computed on the [`MaskWorker`] during the next forward
    /// pass; without, the next sample computes it.
    pub fn sample_with<F>(
        &self,
        vocab_size: usize,
        ahead: bool,
        sample: F,
    ) -> Result<u32, ConstraintError>
    where
        F: FnOnce(&TokenMask) -> u32,
    {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *guard;
        state.settle()?;
        match state.mask_ready.take() {
            Some(filled) if state.mask.len() == vocab_size => filled?,
            _ => {
                if state.mask.len() != vocab_size {
                    state.mask = TokenMask::new(vocab_size);
                } else {
                    state.mask.clear();
                }
                let constraint = state.constraint.as_mut().ok_or_else(lost)?;
                constraint.fill_mask(&mut state.mask)?;
            }
        }
        if state.mask.count_allowed() == 0 {
            return Err(ConstraintError("no token is allowed next".into()));
        }
        let token = sample(&state.mask);
        let constraint = state.settle()?;
        constraint.accept(token)?;
        state.finished = constraint.is_finished();
        if ahead && !state.finished {
            state.compute_ahead();
        }
        Ok(token)
    }

    pub fn is_finished(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .finished
    }
}

impl Clone for ConstraintCell {
    /// # Panics
    /// If the constraint was lost to a panic while computing a mask ahead.
    fn clone(&self) -> Self {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let constraint = state.settle().expect("a constraint to clone").boxed_clone();
        Self::new(constraint)
    }
}

impl std::fmt::Debug for ConstraintCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintCell")
            .field("finished", &self.is_finished())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allows exactly the tokens of `script`, in order, then finishes.
    #[derive(Clone)]
    struct Script {
        script: Vec<u32>,
        at: usize,
    }

    impl TokenConstraint for Script {
        fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<(), ConstraintError> {
            if let Some(&t) = self.script.get(self.at) {
                mask.allow(t);
            }
            Ok(())
        }
        fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
            if self.script.get(self.at) != Some(&token) {
                return Err(ConstraintError(format!("unexpected token {token}")));
            }
            self.at += 1;
            Ok(())
        }
        fn is_finished(&self) -> bool {
            self.at == self.script.len()
        }
        fn boxed_clone(&self) -> Box<dyn TokenConstraint> {
            Box::new(self.clone())
        }
    }

    #[test]
    fn a_mask_forbids_every_logit_it_does_not_allow() {
        let mut mask = TokenMask::new(40);
        mask.allow(3);
        mask.allow(33);
        mask.allow(99);
        let mut logits = vec![1.0; 42];
        mask.apply(&mut logits);
        let kept: Vec<usize> = (0..42).filter(|&i| logits[i].is_finite()).collect();
        assert_eq!(kept, vec![3, 33]);
        assert_eq!(mask.count_allowed(), 2);
    }

    #[test]
    fn a_cell_samples_under_the_mask_and_advances_its_clone_independently() {
        let cell = ConstraintCell::new(Box::new(Script {
            script: vec![5, 7],
            at: 0,
        }));
        let token = cell
            .sample_with(10, true, |mask| {
                (0..10).find(|&i| mask.is_allowed(i)).unwrap()
            })
            .unwrap();
        assert_eq!(token, 5);
        let copy = cell.clone();
        cell.sample_with(10, true, |_| 7).unwrap();
        assert!(cell.is_finished());
        assert!(!copy.is_finished());
    }

    /// [`Script`] that records the thread each mask is filled on.
    struct Watched {
        script: Script,
        fills: std::sync::Arc<Mutex<Vec<Option<String>>>>,
    }

    impl TokenConstraint for Watched {
        fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<(), ConstraintError> {
            let thread = std::thread::current().name().map(str::to_owned);
            self.fills.lock().unwrap().push(thread);
            self.script.fill_mask(mask)
        }
        fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
            self.script.accept(token)
        }
        fn is_finished(&self) -> bool {
            self.script.is_finished()
        }
        fn boxed_clone(&self) -> Box<dyn TokenConstraint> {
            unreachable!("not cloned here")
        }
    }

    #[test]
    fn a_mask_asked_ahead_is_computed_on_the_mask_thread_and_none_after_the_end() {
        let fills = std::sync::Arc::new(Mutex::new(Vec::new()));
        let cell = ConstraintCell::new(Box::new(Watched {
            script: Script {
                script: vec![4, 2, 9],
                at: 0,
            },
            fills: fills.clone(),
        }));
        let first_allowed = |mask: &TokenMask| (0..10).find(|&i| mask.is_allowed(i)).unwrap();
        // Ahead after the first token, not after the second: the third mask is filled here.
        let tokens: Vec<u32> = [true, false, true]
            .into_iter()
            .map(|ahead| cell.sample_with(10, ahead, first_allowed).unwrap())
            .collect();
        assert_eq!(tokens, vec![4, 2, 9]);
        assert!(cell.is_finished());
        let here = std::thread::current().name().map(str::to_owned);
        let ahead = Some("tokenmill-mask".to_owned());
        assert_eq!(*fills.lock().unwrap(), vec![here.clone(), ahead, here]);
    }

    #[test]
    fn a_mask_allowing_nothing_is_an_error_not_a_token() {
        let cell = ConstraintCell::new(Box::new(Script {
            script: vec![],
            at: 0,
        }));
        assert!(cell.sample_with(10, false, |_| 0).is_err());
    }
}
