//! `rigdeck keys`: the gateway's API keys (through the running daemon). A new key's secret is
//! printed once; only its digest is stored.

use std::process::ExitCode;

use serde_json::{json, Value};

use super::run::{block_on, client};
use super::table;

#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// List the keys (revoked ones too) with when they were last used.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Create a key for a client (its name, e.g. the tool that will use it); prints the secret.
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key at once (requests with it are refused from now on).
    Revoke { id: i64 },
}

pub fn run(args: KeysArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let client = client()?;
        match args.command {
            KeysCommand::List { json } => {
                let keys = client.get("/api/v1/keys").await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&keys)?);
                } else {
                    print!("{}", render(&keys));
                }
            }
            KeysCommand::Create { name, json } => {
                let created = client
                    .post("/api/v1/keys", &json!({ "name": name }))
                    .await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&created)?);
                } else {
                    let secret = created["secret"].as_str().unwrap_or_default();
                    println!("{secret}");
                    eprintln!(
                        "key '{}' (id {}) created: this is the only time its secret is shown; clients send it as `Authorization: Bearer <key>` to {}/v1",
                        created["key"]["name"].as_str().unwrap_or_default(),
                        created["key"]["id"],
                        client.base_url()
                    );
                }
            }
            KeysCommand::Revoke { id } => {
                let key = client.delete(&format!("/api/v1/keys/{id}")).await?;
                println!(
                    "revoked key '{}' (id {id})",
                    key["name"].as_str().unwrap_or_default()
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn render(keys: &Value) -> String {
    let when = |v: &Value| {
        v.as_i64().map_or_else(
            || "-".to_owned(),
            rigdeck_core::supervisor::logs::format_utc_ms,
        )
    };
    let rows: Vec<Vec<String>> = keys
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|k| {
            vec![
                k["id"].to_string(),
                k["name"].as_str().unwrap_or_default().to_owned(),
                format!("{}…", k["prefix"].as_str().unwrap_or_default()),
                when(&k["created_at_ms"]),
                when(&k["last_used_at_ms"]),
                if k["revoked_at_ms"].is_null() {
                    "active".to_owned()
                } else {
                    format!("revoked {}", when(&k["revoked_at_ms"]))
                },
            ]
        })
        .collect();
    table::render(
        &["ID", "NAME", "KEY", "CREATED", "LAST USED", "STATE"],
        &rows,
    )
}
