//! `rigdeck chat MODEL`: a conversation in the terminal, stored by the daemon like the Chat
//! page's (it shows up there too). Each line typed is a message; the reply streams as it is
//! written, then its figures (time to first token, tok/s, tokens). Ctrl-C stops a reply;
//! an empty input or `/quit` (or end of input) ends. `-m TEXT` sends one message and exits.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use futures_util::StreamExt;
use rigdeck_core::chat::Message;
use rigdeck_core::launch::client::DaemonClient;
use serde_json::{json, Value};

use super::run::{block_on, client};

#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// The model: a launch profile's name or alias (`rigdeck profiles list`).
    pub model: String,
    /// Send this one message, print the reply and exit.
    #[arg(short = 'm', long = "message")]
    pub message: Option<String>,
    /// The system prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Reasoning on or off (sent as the template's enable_thinking); default: the model's.
    #[arg(long, value_parser = ["on", "off"])]
    pub reasoning: Option<String>,
    /// Print the reasoning text as it streams (dimmed) instead of a one-line note.
    #[arg(long)]
    pub show_reasoning: bool,
    #[arg(long)]
    pub max_tokens: Option<u32>,
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Continue a stored conversation (its id, from the Chat page or `--list`).
    #[arg(long = "continue", value_name = "ID")]
    pub continue_id: Option<i64>,
}

pub fn run(args: ChatArgs) -> anyhow::Result<ExitCode> {
    block_on(async { converse(&client()?, &args).await })
}

/// The conversation of `args`: one message with `-m`, else lines from the terminal.
pub async fn converse(client: &DaemonClient, args: &ChatArgs) -> anyhow::Result<ExitCode> {
    let (id, mut parent) = open_conversation(client, args).await?;
    if let Some(message) = &args.message {
        let reply = exchange(client, id, parent, message, args.show_reasoning).await?;
        return Ok(if reply.status == rigdeck_core::chat::Status::Complete {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    eprintln!(
        "chatting with '{}' (conversation {id}, also on the Chat page); an empty line or /quit ends, Ctrl-C stops a reply",
        args.model
    );
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        std::io::stderr().flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim();
        if line.is_empty() || line == "/quit" {
            break;
        }
        let reply = exchange(client, id, parent, line, args.show_reasoning).await?;
        parent = Some(reply.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// The conversation to use and the reply the next message follows.
async fn open_conversation(
    client: &DaemonClient,
    args: &ChatArgs,
) -> anyhow::Result<(i64, Option<i64>)> {
    if let Some(id) = args.continue_id {
        let found = client
            .get(&format!("/api/v1/chat/conversations/{id}"))
            .await?;
        let leaf = found["conversation"]["active_leaf"].as_i64();
        return Ok((id, leaf));
    }
    let params = json!({
        "reasoning": args.reasoning,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
    });
    let created = client
        .post(
            "/api/v1/chat/conversations",
            &json!({"model": args.model, "system_prompt": args.system, "params": params}),
        )
        .await?;
    let id = created["id"].as_i64().ok_or_else(|| {
        anyhow::anyhow!("the daemon answered without a conversation id: {created}")
    })?;
    Ok((id, None))
}

/// Sends one message and prints the reply as it streams; Ctrl-C stops it.
async fn exchange(
    client: &DaemonClient,
    id: i64,
    parent: Option<i64>,
    text: &str,
    show_reasoning: bool,
) -> anyhow::Result<Message> {
    // Listen first, so no delta of the reply is missed.
    let events = client
        .open_stream(&format!("/api/v1/chat/conversations/{id}/events"))
        .await?;
    let sent = client
        .post(
            &format!("/api/v1/chat/conversations/{id}/messages"),
            &json!({"parent_id": parent, "content": text}),
        )
        .await?;
    let reply_id = sent["assistant"]["id"]
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("the daemon answered without a reply id: {sent}"))?;
    let mut printer = Printer {
        show_reasoning,
        ..Printer::default()
    };
    let mut stream = events.bytes_stream();
    let mut pending = String::new();
    loop {
        let chunk = tokio::select! {
            chunk = stream.next() => chunk,
            _ = tokio::signal::ctrl_c() => {
                client.post(&format!("/api/v1/chat/messages/{reply_id}/stop"), &json!({})).await?;
                continue;
            }
        };
        let Some(chunk) = chunk else {
            anyhow::bail!("the daemon closed the event stream before the reply ended");
        };
        pending.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            if let Some(done) = printer.event(&event, reply_id)? {
                return Ok(done);
            }
        }
    }
}

#[derive(Default)]
struct Printer {
    show_reasoning: bool,
    thinking_noted: bool,
    status_shown: bool,
}

impl Printer {
    /// Prints what an event adds; the final message when the reply ended.
    fn event(&mut self, event: &str, reply_id: i64) -> anyhow::Result<Option<Message>> {
        let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
            return Ok(None);
        };
        let value: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        let body = &value["data"];
        let mut out = std::io::stdout();
        match value["type"].as_str() {
            Some("chat.delta") if body["message_id"] == reply_id => {
                if let Some(line) = body["status_line"].as_str() {
                    eprintln!("({line})");
                    self.status_shown = true;
                }
                let reasoning = body["reasoning"].as_str().unwrap_or_default();
                if !reasoning.is_empty() {
                    if self.show_reasoning {
                        write!(out, "\x1b[2m{reasoning}\x1b[0m")?;
                    } else if !self.thinking_noted {
                        eprintln!("(thinking…)");
                        self.thinking_noted = true;
                    }
                }
                write!(out, "{}", body["content"].as_str().unwrap_or_default())?;
                out.flush()?;
                Ok(None)
            }
            Some("chat.message") if body["id"] == reply_id && body["status"] != "streaming" => {
                let message: Message = serde_json::from_value(body.clone())?;
                println!();
                eprintln!("{}", summary(&message));
                Ok(Some(message))
            }
            _ => Ok(None),
        }
    }
}

/// `[32 tokens · first token 120 ms · 45.2 tok/s]`, or why it ended early.
fn summary(m: &Message) -> String {
    let s = &m.stats;
    let mut parts = Vec::new();
    if let Some(n) = s.completion_tokens {
        parts.push(format!("{n} tokens"));
    }
    if let Some(ttft) = s.ttft_ms {
        parts.push(format!("first token {ttft:.0} ms"));
    }
    if let Some(tps) = s.decode_tps {
        parts.push(format!("{tps:.1} tok/s"));
    }
    let end = match m.status {
        rigdeck_core::chat::Status::Complete => String::new(),
        other => format!(
            " {}{}",
            other.as_str(),
            m.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
    };
    format!("[{}]{end}", parts.join(" · "))
}
