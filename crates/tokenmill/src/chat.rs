//! `tokenmill run MODEL`, as `ollama run`: fetches the model if it is named on the Hub and not
//! cached, serves it in this process on a free local port, and chats with it in the
//! terminal, each reply streamed as it is generated. Lines come from stdin, so a pipe works
//! as well as a terminal; `/bye` or the end of input ends the chat.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};
use tokenmill_server::http::api_server::{spawn_server, ServeArgs};
use tokenmill_server::model::model_loader;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A .gguf file, a Hugging Face folder or a Hub name (org/repo[:QUANT], fetched into the
    /// Hugging Face cache when missing). Default: the cached SmolLM2-135M-Instruct Q4_1.
    #[arg(value_name = "MODEL")]
    pub name: Option<String>,
    /// Most tokens of one reply.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: u32,
    /// A system prompt for the whole chat.
    #[arg(long)]
    pub system: Option<String>,
    /// The server's flags (engine, text, limits); --host and --port are not used: the
    /// model is served on a free port of 127.0.0.1 for this chat alone.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The chat typed at the terminal or piped in: what has been said, sent whole each turn.
struct Chat {
    client: reqwest::Client,
    url: String,
    model: String,
    max_tokens: u32,
    messages: Vec<Value>,
}

pub fn run(mut args: RunArgs) -> anyhow::Result<()> {
    if let Some(name) = &args.name {
        args.serve.engine.model = Some(name.clone());
    }
    let local = args.serve.hub.localize(&args.serve.engine)?;
    let model = model_loader::load_with(&local.engine, &args.serve.text)?;
    let mut options = args.serve.options();
    let name = options
        .served_model_name
        .clone()
        .or(local.hub_name)
        .unwrap_or_else(|| model.name.clone());
    options.served_model_name = Some(name.clone());
    let server = spawn_server(model, options, "127.0.0.1:0".parse()?)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut chat = Chat {
        client: reqwest::Client::new(),
        url: format!("{}/v1/chat/completions", server.base_url()),
        model: name.clone(),
        max_tokens: args.max_tokens,
        messages: args
            .system
            .iter()
            .map(|s| json!({"role": "system", "content": s}))
            .collect(),
    };
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    if terminal {
        eprintln!("chatting with {name}: /bye or Ctrl-D ends");
    }
    let mut line = String::new();
    loop {
        if terminal {
            print!(">>> ");
            std::io::stdout().flush()?;
        }
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let text = line.trim();
        if text == "/bye" {
            break;
        }
        if text.is_empty() {
            continue;
        }
        chat.messages.push(json!({"role": "user", "content": text}));
        match runtime.block_on(chat.reply()) {
            Ok(reply) => chat
                .messages
                .push(json!({"role": "assistant", "content": reply})),
            Err(error) => {
                // The turn is dropped, so the next one is not sent after an unanswered one.
                chat.messages.pop();
                eprintln!("error: {error:#}");
            }
        }
    }
    drop(runtime);
    server.shutdown();
    Ok(())
}

impl Chat {
    /// Sends the chat so far, prints the reply as its pieces arrive, and returns it whole.
    async fn reply(&self) -> anyhow::Result<String> {
        let mut response = self
            .client
            .post(&self.url)
            .json(&json!({
                "model": self.model,
                "messages": self.messages,
                "max_tokens": self.max_tokens,
                "stream": true,
            }))
            .send()
            .await
            .context("sending the message to the server")?;
        if !response.status().is_success() {
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let message = body["error"]["message"]
                .as_str()
                .unwrap_or("no reason given");
            bail!("the server answered {status}: {message}");
        }
        let mut stdout = std::io::stdout();
        let mut reply = String::new();
        let mut pending = String::new();
        while let Some(chunk) = response.chunk().await.context("reading the reply")? {
            pending.push_str(&String::from_utf8_lossy(&chunk));
            // Server-sent events end with a blank line; a chunk may hold part of one.
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                for data in event.lines().filter_map(|l| l.strip_prefix("data: ")) {
                    if data == "[DONE]" {
                        continue;
                    }
                    let piece: Value = serde_json::from_str(data)
                        .with_context(|| format!("a streamed chunk that is not JSON: {data}"))?;
                    if let Some(message) = piece["error"]["message"].as_str() {
                        bail!("{message}");
                    }
                    if let Some(text) = piece["choices"][0]["delta"]["content"].as_str() {
                        reply.push_str(text);
                        stdout.write_all(text.as_bytes())?;
                        stdout.flush()?;
                    }
                }
            }
        }
        writeln!(stdout)?;
        Ok(reply)
    }
}
