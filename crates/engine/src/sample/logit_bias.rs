//! `LogitBias`: per-token additions to the logits before sampling (OpenAI's `logit_bias`).

use crate::error::{EngineError, Result};

/// The largest bias either way; OpenAI's range, where ±100 bans or forces a token.
pub const MAX_LOGIT_BIAS: f32 = 100.0;

/// Token ids with the bias added to their logits; sorted by id, each id once. Ids are checked
/// against the vocabulary at admission (`EngineLimits::validate`), which knows its size.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogitBias(Vec<(u32, f32)>);

impl LogitBias {
    /// Refuses a bias outside [-100, 100] (or NaN); a repeated id keeps its last bias.
    pub fn new(entries: impl IntoIterator<Item = (u32, f32)>) -> Result<Self> {
        let mut entries: Vec<(u32, f32)> = entries.into_iter().collect();
        if let Some(&(id, bias)) = entries
            .iter()
            .find(|(_, b)| !(-MAX_LOGIT_BIAS..=MAX_LOGIT_BIAS).contains(b))
        {
            return Err(EngineError::InvalidRequest(format!(
                "the logit bias of token {id} must be in [-100, 100], got {bias}"
            )));
        }
        entries.reverse();
        entries.sort_by_key(|&(id, _)| id);
        entries.dedup_by_key(|&mut (id, _)| id);
        Ok(Self(entries))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn max_token_id(&self) -> Option<u32> {
        self.0.last().map(|&(id, _)| id)
    }

    pub fn apply(&self, logits: &mut [f32]) {
        for &(id, bias) in &self.0 {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_and_nan_biases_are_refused() {
        assert!(LogitBias::new([(1, 100.5)]).is_err());
        assert!(LogitBias::new([(1, f32::NAN)]).is_err());
        assert!(LogitBias::new([(1, -100.0), (2, 100.0)]).is_ok());
    }

    #[test]
    fn a_repeated_id_keeps_its_last_bias() {
        let bias = LogitBias::new([(3, 1.0), (2, 5.0), (3, -2.0)]).unwrap();
        let mut logits = vec![0.0; 4];
        bias.apply(&mut logits);
        assert_eq!(logits, vec![0.0, 0.0, 5.0, -2.0]);
        assert_eq!(bias.max_token_id(), Some(3));
    }
}
