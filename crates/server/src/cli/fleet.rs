//! `rigdeck fleet`: pairing daemons (through the running daemon). On a rig, `invite` prints a
//! one-time join code; on the desk, `join CODE` pairs the two over pinned mutual TLS; `list`,
//! `hello` and `remove` follow the paired peers; `lend` takes a lease of a peer's devices for
//! llama.cpp RPC through the fleet channel.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use super::run::{block_on, client};
use super::table;

#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// This daemon's fleet name, certificate fingerprint and listener.
    Identity {
        #[arg(long)]
        json: bool,
    },
    /// Make a one-time join code (printed alone on stdout) for a desk to pair with this rig.
    Invite {
        /// HOST:PORT the desk dials: a LAN or VPN address, or an SSH tunnel's local end
        /// (default: the address of this daemon's --fleet-bind).
        #[arg(long, value_name = "HOST:PORT")]
        address: Option<String>,
        /// How long the code stays usable: 90s, 10m, 2h, 1d (at most 7 days).
        #[arg(long, default_value = "10m", value_parser = parse_ttl)]
        ttl: Duration,
        #[arg(long)]
        json: bool,
    },
    /// Pair this daemon (the desk) with the rig a join code names.
    Join {
        code: String,
        #[arg(long)]
        json: bool,
    },
    /// The paired peers: role, address, fingerprint, paired since, and whether each answers now.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Ask a peer for its hello over the fleet channel (name, version, time).
    Hello { name: String },
    /// Unpin a peer: its requests are refused from now on (pair again to undo).
    Remove { name: String },
    /// Use a peer's devices with llama.cpp RPC through the fleet channel: prints the endpoint
    /// to give llama-server as `--rpc` (the lender's rpc-server never meets the network).
    Lend {
        /// The peer that lends (see `rigdeck fleet list`).
        #[arg(required_unless_present_any = ["list", "release"])]
        peer: Option<String>,
        /// Its devices, comma-separated, as llama.cpp names them there (CPU, CUDA0, …).
        #[arg(long, default_value = "CPU", value_delimiter = ',')]
        devices: Vec<String>,
        /// This daemon's llama.cpp build to match (default: its newest with RPC).
        #[arg(long)]
        engine_build: Option<i64>,
        /// List the leases this daemon took (with bytes moved) and lends.
        #[arg(long, conflicts_with_all = ["peer", "release"])]
        list: bool,
        /// Release a lease: its endpoint closes and the lender stops its rpc-server.
        #[arg(long, value_name = "LEASE", conflicts_with = "peer")]
        release: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: FleetArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let client = client()?;
        match args.command {
            FleetCommand::Identity { json } => {
                let identity = client.get("/api/v1/fleet").await?;
                print_or_json(json, &identity, render_identity)?;
            }
            FleetCommand::Invite { address, ttl, json } => {
                let body = json!({ "address": address, "ttl_secs": ttl.as_secs() });
                let invite = client.post("/api/v1/fleet/invites", &body).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&invite)?);
                } else {
                    println!("{}", invite["code"].as_str().unwrap_or_default());
                    eprintln!("{}", invite_hint(&invite));
                }
            }
            FleetCommand::Join { code, json } => {
                let joined = client
                    .post("/api/v1/fleet/join", &json!({ "code": code }))
                    .await?;
                print_or_json(json, &joined, |j| {
                    j["message"].as_str().unwrap_or_default().to_owned() + "\n"
                })?;
            }
            FleetCommand::List { json } => {
                let peers = client.get("/api/v1/fleet/peers").await?;
                print_or_json(json, &peers, render_peers)?;
            }
            FleetCommand::Hello { name } => {
                let hello = client
                    .get(&format!("/api/v1/fleet/peers/{name}/hello"))
                    .await?;
                println!(
                    "'{}' answers: Rigdeck {}, its clock at {}",
                    hello["name"].as_str().unwrap_or_default(),
                    hello["version"].as_str().unwrap_or_default(),
                    when(&hello["time_ms"])
                );
            }
            FleetCommand::Remove { name } => {
                let peer = client
                    .delete(&format!("/api/v1/fleet/peers/{name}"))
                    .await?;
                println!(
                    "removed the {} '{}' ({}): its requests are refused from now on",
                    peer["role"].as_str().unwrap_or_default(),
                    peer["name"].as_str().unwrap_or_default(),
                    peer["fingerprint"].as_str().unwrap_or_default()
                );
            }
            FleetCommand::Lend {
                peer,
                devices,
                engine_build,
                list,
                release,
                json,
            } => {
                if list {
                    let leases = client.get("/api/v1/fleet/rpc").await?;
                    print_or_json(json, &leases, render_leases)?;
                } else if let Some(lease) = release {
                    let released = client.delete(&format!("/api/v1/fleet/rpc/{lease}")).await?;
                    print_or_json(json, &released, |r| {
                        r["message"].as_str().unwrap_or_default().to_owned() + "\n"
                    })?;
                } else {
                    let peer = peer.unwrap_or_default();
                    let body = json!({ "devices": devices, "engine_build_id": engine_build });
                    let taken = client
                        .post(&format!("/api/v1/fleet/peers/{peer}/rpc"), &body)
                        .await?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&taken)?);
                    } else {
                        println!("{}", taken["endpoint"].as_str().unwrap_or_default());
                        eprintln!("{}", lease_hint(&taken));
                    }
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// What a lease gives, and how to use and release it (on stderr: stdout is the endpoint alone).
fn lease_hint(taken: &Value) -> String {
    let devices: Vec<String> = taken["devices"]
        .as_array()
        .map(|ds| {
            ds.iter()
                .map(|d| {
                    format!(
                        "{} ({}, {} of {} MiB free)",
                        d["name"].as_str().unwrap_or_default(),
                        d["description"].as_str().unwrap_or_default(),
                        d["free_mib"],
                        d["total_mib"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "lease {lease} from '{peer}' (llama.cpp {version}): {devices}\n\
         use it with: llama-server --rpc {endpoint} -ngl 99 …   (llama.cpp names its devices RPC0…)\n\
         release it with: rigdeck fleet lend --release {lease}",
        lease = taken["lease"].as_str().unwrap_or_default(),
        peer = taken["peer"].as_str().unwrap_or_default(),
        version = taken["build"]["version"].as_str().unwrap_or_default(),
        devices = devices.join(", "),
        endpoint = taken["endpoint"].as_str().unwrap_or_default(),
    )
}

fn render_leases(leases: &Value) -> String {
    let mut out = String::new();
    let taken = leases["taken"].as_array().cloned().unwrap_or_default();
    let lent = leases["lent"].as_array().cloned().unwrap_or_default();
    if taken.is_empty() && lent.is_empty() {
        return "no RPC leases: `rigdeck fleet lend PEER --devices CPU` takes one\n".to_owned();
    }
    for l in &taken {
        out.push_str(&format!(
            "took  {}  from {}  endpoint {}  {} MB sent, {} MB received, {} tunnel(s) open\n",
            l["lease"].as_str().unwrap_or_default(),
            l["peer"].as_str().unwrap_or_default(),
            l["endpoint"].as_str().unwrap_or_default(),
            megabytes(&l["bytes_sent"]),
            megabytes(&l["bytes_received"]),
            l["tunnels_open"],
        ));
    }
    for l in &lent {
        let devices: Vec<&str> = l["devices"]
            .as_array()
            .map(|ds| ds.iter().filter_map(|d| d["name"].as_str()).collect())
            .unwrap_or_default();
        out.push_str(&format!(
            "lends {}  to {}  rpc-server pid {} on {}  devices {}\n",
            l["lease"].as_str().unwrap_or_default(),
            l["peer"].as_str().unwrap_or_default(),
            l["pid"],
            l["listen"].as_str().unwrap_or_default(),
            devices.join(",")
        ));
    }
    out
}

fn megabytes(bytes: &Value) -> String {
    format!("{:.1}", bytes.as_f64().unwrap_or(0.0) / 1e6)
}

fn print_or_json(
    json: bool,
    value: &Value,
    render: impl Fn(&Value) -> String,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{}", render(value));
    }
    Ok(())
}

/// `90s`, `10m`, `2h`, `1d` or plain seconds.
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let seconds_per = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    let number: u64 = number.parse().unwrap_or(0);
    if seconds_per == 0 || number == 0 {
        return Err(format!(
            "'{text}' is not a duration: use a number with s, m, h or d (e.g. 10m)"
        ));
    }
    Ok(Duration::from_secs(number.saturating_mul(seconds_per)))
}

fn when(value: &Value) -> String {
    value.as_i64().map_or_else(
        || "-".to_owned(),
        rigdeck_core::supervisor::logs::format_utc_ms,
    )
}

fn invite_hint(invite: &Value) -> String {
    format!(
        "one-time join code for {} (fingerprint {}), usable once until {}.\nOn the desk: rigdeck fleet join <the code above>",
        invite["address"].as_str().unwrap_or_default(),
        invite["fingerprint"].as_str().unwrap_or_default(),
        when(&invite["expires_at_ms"])
    )
}

fn render_identity(identity: &Value) -> String {
    let listen = identity["listen"]
        .as_str()
        .map_or_else(|| "off (start with --fleet-bind)".to_owned(), str::to_owned);
    format!(
        "name         {}\nfingerprint  {}\nlistener     {listen}\n",
        identity["name"].as_str().unwrap_or_default(),
        identity["fingerprint"].as_str().unwrap_or_default(),
    )
}

fn answers(peer: &Value) -> String {
    match peer["answering"].as_bool() {
        Some(true) => format!(
            "yes (Rigdeck {})",
            peer["hello"]["version"].as_str().unwrap_or_default()
        ),
        Some(false) => format!("no, since {}", when(&peer["silent_since_ms"])),
        None => "- (no listener to call)".to_owned(),
    }
}

fn render_peers(peers: &Value) -> String {
    let peers = peers.as_array().map(Vec::as_slice).unwrap_or_default();
    if peers.is_empty() {
        return "no paired peers: `rigdeck fleet invite` on a rig, then `rigdeck fleet join CODE` on the desk\n".to_owned();
    }
    let rows: Vec<Vec<String>> = peers
        .iter()
        .map(|p| {
            vec![
                p["name"].as_str().unwrap_or_default().to_owned(),
                p["role"].as_str().unwrap_or_default().to_owned(),
                p["address"].as_str().unwrap_or("-").to_owned(),
                p["fingerprint"].as_str().unwrap_or_default().to_owned(),
                when(&p["paired_at_ms"]),
                answers(p),
            ]
        })
        .collect();
    let mut out = table::render(
        &[
            "NAME",
            "ROLE",
            "ADDRESS",
            "FINGERPRINT",
            "PAIRED",
            "ANSWERS",
        ],
        &rows,
    );
    for peer in peers {
        if let (Some(false), Some(problem)) =
            (peer["answering"].as_bool(), peer["last_problem"].as_str())
        {
            out += &format!("{}: {problem}\n", peer["name"].as_str().unwrap_or_default());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_read_with_their_unit() {
        assert_eq!(parse_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_ttl("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_ttl("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_ttl("45"), Ok(Duration::from_secs(45)));
        assert!(parse_ttl("10 minutes").is_err());
        assert!(parse_ttl("0m").is_err());
        assert!(parse_ttl("m").is_err());
    }
}
