//! Splits a Server-Sent Events byte stream into its `data:` payloads.

/// Accumulates bytes until whole lines are available; network reads may cut lines anywhere.
#[derive(Default, Debug)]
pub struct SseParser {
    pending: Vec<u8>,
}

impl SseParser {
    /// Feeds one network read and returns the `data:` payloads it completed, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut payloads = Vec::new();
        while let Some(newline) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=newline).collect();
            if let Some(payload) = data_payload(&line) {
                payloads.push(payload);
            }
        }
        payloads
    }
}

fn data_payload(line: &[u8]) -> Option<String> {
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end_matches(['\n', '\r']);
    let payload = line.strip_prefix("data:")?;
    Some(payload.strip_prefix(' ').unwrap_or(payload).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_split_across_reads_are_reassembled() {
        let mut parser = SseParser::default();
        assert!(parser.feed(b"data: {\"a\"").is_empty());
        assert_eq!(
            parser.feed(b":1}\r\n\r\ndata: [DONE]\n\n"),
            vec!["{\"a\":1}", "[DONE]"]
        );
    }

    #[test]
    fn comments_and_other_fields_are_ignored() {
        let mut parser = SseParser::default();
        assert_eq!(
            parser.feed(b": keep-alive\nevent: x\ndata:{}\n"),
            vec!["{}"]
        );
    }
}
