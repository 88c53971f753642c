//! Clients that hold a connection without finishing a request are cut off: silent sockets and
//! half-sent or trickled headers are closed after `--header-read-timeout`; a body announced
//! larger than `--max-request-body-bytes` gets 413 before any of it is sent, even when the
//! client waits for `100 Continue`. Raw sockets, so nothing smooths over what the server does.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::start_server;
use tokenmill_server::http::api_server::{ServerHandle, ServerOptions};
use tokenmill_server::serving::request_limits::RequestLimits;

const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(1);
const BODY_LIMIT: usize = 4096;

fn server() -> &'static ServerHandle {
    static SERVER: OnceLock<ServerHandle> = OnceLock::new();
    SERVER.get_or_init(|| {
        let options = ServerOptions {
            header_read_timeout: HEADER_READ_TIMEOUT,
            request_limits: RequestLimits {
                max_request_body_bytes: BODY_LIMIT,
                ..RequestLimits::default()
            },
            ..ServerOptions::default()
        };
        start_server(&[], options)
    })
}

fn connect() -> TcpStream {
    let socket = TcpStream::connect(server().addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket
}

/// Reads until the server closes the socket; what it sent, and when it closed (from `since`).
/// Panics if the socket is still open after the read timeout.
fn read_until_closed(socket: &mut TcpStream, since: Instant) -> (String, Duration) {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match socket.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server still holds the connection after {:?} ({e}); it sent {:?}",
                since.elapsed(),
                String::from_utf8_lossy(&answer)
            ),
        }
    }
    (
        String::from_utf8_lossy(&answer).into_owned(),
        since.elapsed(),
    )
}

fn assert_closed_after_the_header_timeout(closed_after: Duration) {
    assert!(
        closed_after >= HEADER_READ_TIMEOUT - Duration::from_millis(100),
        "closed after {closed_after:?}, before the header read timeout"
    );
    assert!(
        closed_after < HEADER_READ_TIMEOUT + Duration::from_secs(3),
        "closed only after {closed_after:?}"
    );
}

#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_header_read_timeout() {
    crate::common::skip_without_model!();
    let mut socket = connect();
    let (_, closed_after) = read_until_closed(&mut socket, Instant::now());
    assert_closed_after_the_header_timeout(closed_after);
}

#[test]
fn half_sent_headers_are_closed_after_the_header_read_timeout() {
    crate::common::skip_without_model!();
    let mut socket = connect();
    let start = Instant::now();
    socket
        .write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: appl")
        .unwrap();
    let (answer, closed_after) = read_until_closed(&mut socket, start);
    assert!(!answer.contains("200 OK"), "{answer}");
    assert_closed_after_the_header_timeout(closed_after);
}

#[test]
fn headers_trickled_a_byte_at_a_time_are_cut_off_at_the_header_read_timeout() {
    crate::common::skip_without_model!();
    let mut socket = connect();
    let start = Instant::now();
    let head = b"GET /health HTTP/1.1\r\nhost: x\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    // Each byte arrives well within the timeout; the whole head does not.
    for byte in head {
        if socket.write_all(&[*byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if start.elapsed() > HEADER_READ_TIMEOUT * 4 {
            break;
        }
    }
    let (answer, closed_after) = read_until_closed(&mut socket, start);
    assert!(
        answer.is_empty(),
        "the trickled request was answered: {answer}"
    );
    assert_closed_after_the_header_timeout(closed_after);
}

#[test]
fn expect_100_continue_with_a_body_over_the_limit_gets_413_without_100_continue() {
    crate::common::skip_without_model!();
    let mut socket = connect();
    let start = Instant::now();
    socket
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              expect: 100-continue\r\ncontent-length: 10000000000\r\n\r\n",
        )
        .unwrap();
    let (answer, _) = read_until_closed(&mut socket, start);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    let body: serde_json::Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "request_too_large", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--max-request-body-bytes"), "{message}");
}

#[test]
fn expect_100_continue_with_a_body_within_the_limit_gets_100_continue_then_an_answer() {
    crate::common::skip_without_model!();
    let mut socket = connect();
    let body = br#"{"prompt": "Hi", "max_tokens": 1}"#;
    write!(
        socket,
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         expect: 100-continue\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut interim = [0u8; 25];
    socket.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    socket.write_all(body).unwrap();
    let (answer, _) = read_until_closed(&mut socket, Instant::now());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn a_chunked_body_over_the_limit_gets_413() {
    crate::common::skip_without_model!();
    let mut socket = connect();
    let chunk = "x".repeat(BODY_LIMIT + 1);
    write!(
        socket,
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    )
    .unwrap();
    let (answer, _) = read_until_closed(&mut socket, Instant::now());
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("--max-request-body-bytes"), "{answer}");
}
