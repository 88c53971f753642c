//! Speculative decoding: proposers guess the next tokens of a sequence cheaply; the
//! scheduler verifies the guesses as ordinary scheduled tokens in the step's batch.

pub mod draft_model_proposer;
pub mod ngram_proposer;
pub mod proposer;
pub mod speculation;
pub mod suffix_proposer;
pub mod suffix_tree;

pub use proposer::Proposer;
pub use suffix_proposer::SuffixProposer;
