//! `ResponseStore`: responses kept in memory (`store: true`) for `previous_response_id`,
//! `GET` and `DELETE /v1/responses/{id}` — at most `--max-stored-responses` of them, the
//! oldest evicted first, so memory stays bounded however many clients store.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;

use crate::api::api_error::ApiError;

/// One kept response.
#[derive(Debug, Clone)]
pub struct StoredResponse {
    /// The response object as it was returned.
    pub response: Value,
    /// Its input items, those of the responses it continued first (no instructions).
    pub conversation: Vec<Value>,
}

impl StoredResponse {
    /// What a response that continues this one starts from: its conversation, then its
    /// output items.
    pub fn continued(&self) -> Vec<Value> {
        let mut items = self.conversation.clone();
        items.extend(
            self.response["output"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
        items
    }
}

#[derive(Debug)]
pub struct ResponseStore {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Ids oldest first; a deleted id stays here until it reaches the front.
    order: VecDeque<String>,
    entries: HashMap<String, StoredResponse>,
}

impl ResponseStore {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether anything is kept at all (`--max-stored-responses 0` keeps nothing).
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    pub fn insert(&self, id: String, stored: StoredResponse) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        while inner.entries.len() >= self.capacity {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            inner.entries.remove(&oldest);
        }
        // Deleted ids linger in `order`; drop them once they outnumber the live ones.
        if inner.order.len() > 2 * self.capacity {
            let Inner { order, entries } = &mut *inner;
            order.retain(|id| entries.contains_key(id));
        }
        inner.order.push_back(id.clone());
        inner.entries.insert(id, stored);
    }

    pub fn get(&self, id: &str) -> Result<StoredResponse, ApiError> {
        self.lock()
            .entries
            .get(id)
            .cloned()
            .ok_or_else(|| self.not_found(id))
    }

    pub fn remove(&self, id: &str) -> Result<(), ApiError> {
        match self.lock().entries.remove(id) {
            Some(_) => Ok(()),
            None => Err(self.not_found(id)),
        }
    }

    /// OpenAI's 404, saying every way a response can be missing here.
    pub fn not_found(&self, id: &str) -> ApiError {
        ApiError::not_found(format!(
            "no response with id `{id}` is stored: it was sent with `store: false`, was \
             deleted, or was evicted (this server keeps the {} most recent; \
             --max-stored-responses)",
            self.capacity
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves whole entries behind; they stay usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(n: u32) -> StoredResponse {
        StoredResponse {
            response: json!({"n": n, "output": [{"type": "message"}]}),
            conversation: vec![json!({"role": "user", "content": "x"})],
        }
    }

    #[test]
    fn the_oldest_is_evicted_past_the_capacity() {
        let store = ResponseStore::new(2);
        for n in 0..3 {
            store.insert(format!("r{n}"), stored(n));
        }
        assert_eq!(store.get("r0").unwrap_err().status, 404);
        assert_eq!(store.get("r2").unwrap().response["n"], 2);
        assert_eq!(store.get("r1").unwrap().continued().len(), 2);
    }

    #[test]
    fn a_deleted_response_is_gone_and_frees_its_place() {
        let store = ResponseStore::new(2);
        store.insert("a".into(), stored(0));
        store.insert("b".into(), stored(1));
        store.remove("a").unwrap();
        assert!(store.remove("a").is_err());
        store.insert("c".into(), stored(2));
        assert!(store.get("b").is_ok() && store.get("c").is_ok());
        for n in 0..20 {
            store.insert(format!("x{n}"), stored(n));
        }
        assert!(store.lock().order.len() <= 5);
    }

    #[test]
    fn a_store_of_size_zero_keeps_nothing() {
        let store = ResponseStore::new(0);
        store.insert("a".into(), stored(0));
        assert!(store.get("a").is_err());
    }
}
