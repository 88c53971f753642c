//! The `--api-key` check: a bearer token compared in constant time.
//!
//! An early-exit comparison (`==` on strings) returns as soon as a byte differs, so the time
//! it takes tells a client how long a prefix of its guess is right; over many requests that
//! recovers the key byte by byte. The comparison here does the same work whatever the guess.

use axum::http::{header, HeaderMap};

/// Whether the request's `Authorization: Bearer <key>` carries `key`.
pub fn sent_key_matches(headers: &HeaderMap, key: &str) -> bool {
    let sent = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .and_then(|v| v.strip_prefix(b"Bearer "));
    sent.is_some_and(|sent| constant_time_eq(sent, key.as_bytes()))
}

/// `sent == expected`, in a time that depends only on `expected`'s length: every byte of the
/// key is xor-ed with a byte of the guess (wrapping around a short guess) and the differences
/// are or-folded, so neither the position of the first wrong byte nor the guess's length
/// changes how many steps run. A length mismatch is folded into the same accumulator.
pub fn constant_time_eq(sent: &[u8], expected: &[u8]) -> bool {
    let mut difference = u8::from(sent.len() != expected.len());
    for (i, &want) in expected.iter().enumerate() {
        let got = if sent.is_empty() {
            // Any byte differs from some key byte unless the key is empty too; the length
            // mismatch above already marks the guess wrong.
            0
        } else {
            sent[i % sent.len()]
        };
        difference |= got ^ want;
    }
    // Keeps the optimizer from turning the fold back into an early exit.
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_key_matches() {
        assert!(constant_time_eq(b"sesame", b"sesame"));
        assert!(constant_time_eq(b"", b""));
        for wrong in [
            &b""[..],
            b"s",
            b"sesam",
            b"sesamee",
            b"sesamesesame",
            b"Sesame",
            b"sesamE",
            b"xxxxxx",
        ] {
            assert!(!constant_time_eq(wrong, b"sesame"), "{wrong:?}");
        }
        assert!(!constant_time_eq(b"a", b""));
    }

    #[test]
    fn the_key_must_come_as_a_bearer_token() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            headers
        };
        assert!(sent_key_matches(&with("Bearer sesame"), "sesame"));
        assert!(!sent_key_matches(&with("sesame"), "sesame"));
        assert!(!sent_key_matches(&with("Basic sesame"), "sesame"));
        assert!(!sent_key_matches(&with("Bearer sesame "), "sesame"));
        assert!(!sent_key_matches(&HeaderMap::new(), "sesame"));
    }
}
