//! The tests' scripted mock server as a separate process, for measuring the client's own CPU
//! use without the server in the same process: `cargo run --release --example mock_server -- 8123`.

#[allow(dead_code)]
#[path = "../tests/it/common/mock_server.rs"]
mod mock_server;

fn main() {
    let port = std::env::args().nth(1).unwrap_or_else(|| "8123".to_owned());
    let server = mock_server::MockServer::start_on(
        &format!("127.0.0.1:{port}"),
        mock_server::MockOptions {
            tokenizer: true,
            ..Default::default()
        },
    );
    println!("mock server on {}", server.base_url);
    loop {
        std::thread::park();
    }
}
