//! `tokenmill run`: with stdin piped, each line is a user turn, each reply is printed to
//! stdout (streamed as it is generated) on a line of its own, and the end of input or `/bye`
//! ends the chat with status 0.

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{model, skip_without_model};

/// `tokenmill run <default model> <args>` with `input` piped to its stdin.
fn chat(args: &[&str], input: &str) -> Output {
    let model = model::path();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .arg("run")
        .arg(&model)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    // The pipe is closed here (dropped): the end of input.
    let output = child.wait_with_output().unwrap();
    eprintln!("stderr: {}", String::from_utf8_lossy(&output.stderr));
    output
}

#[test]
fn a_piped_chat_prints_a_reply_per_line_and_ends_at_the_end_of_input() {
    skip_without_model!();
    let output = chat(
        &["--max-tokens", "8"],
        "Hello, who are you?\nAnd what is 2+2?\n",
    );
    assert!(output.status.success(), "{:?}", output.status);
    let stdout = String::from_utf8(output.stdout).unwrap();
    // Each reply ends with a line break (a sampled reply may hold more).
    assert!(stdout.lines().count() >= 2, "{stdout:?}");
    assert!(
        stdout.ends_with('\n') && !stdout.trim().is_empty(),
        "{stdout:?}"
    );
}

#[test]
fn bye_ends_the_chat_while_the_input_is_still_open() {
    skip_without_model!();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokenmill"))
        .arg("run")
        .arg(model::path())
        .args(["--max-tokens", "4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary runs");
    // Held open: only `/bye` can end this chat.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"Hi\n/bye\n").unwrap();
    stdin.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the chat did not end at /bye");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(!stdout.trim().is_empty(), "the first line got a reply");
    drop(stdin);
}
