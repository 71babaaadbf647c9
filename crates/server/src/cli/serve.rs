//! `rigdeck serve`: the headless daemon.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use crate::running::DEFAULT_BIND;
use crate::{start, RunningServer, ServeOptions};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback exposes the rig to the network (the token is
    /// still required); a warning is printed.
    #[arg(long, default_value = DEFAULT_BIND, value_name = "IP:PORT")]
    pub bind: SocketAddr,
    /// Also answer to this host name (a LAN name or reverse proxy); repeatable. IP addresses and
    /// localhost are always accepted.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// Also serve the gateway alone (`/v1` and `/metrics`, API keys required) on this address,
    /// e.g. 0.0.0.0:8080 for other machines' tools while the UI stays on loopback.
    #[arg(long, value_name = "IP:PORT")]
    pub gateway_bind: Option<SocketAddr>,
    /// Listen for paired Rigdeck daemons (the fleet's mutual-TLS channel) on this address:
    /// 127.0.0.1:7879 for SSH tunnels, a LAN or VPN address for the network. Off by default.
    #[arg(long, value_name = "IP:PORT")]
    pub fleet_bind: Option<SocketAddr>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if !args.bind.ip().is_loopback() {
        eprintln!(
            "WARNING: listening on {} makes Rigdeck reachable from the network. Anyone who can reach this \
             port and has the token controls the rig. Use --bind 127.0.0.1:{} unless you mean it.",
            args.bind,
            args.bind.port()
        );
    }
    let mut options = ServeOptions::from_env(args.bind)?;
    options.allow_hosts = args.allow_hosts;
    options.gateway_bind = args.gateway_bind;
    options.fleet_bind = args.fleet_bind;
    let token_file = options.paths.token_file();
    let mut server = start(options).await?;
    println!("Rigdeck is serving on {}", server.base_url());
    if let Some(gateway) = server.gateway_addr() {
        println!(
            "The gateway alone is on http://{gateway}/v1 (clients need an API key: `rigdeck keys create NAME`)"
        );
    }
    if let Some(fleet) = server.fleet() {
        if let Some(address) = fleet.listen_address() {
            println!(
                "The fleet listener is on {address} as '{}' (fingerprint {}): `rigdeck fleet invite` makes a join code",
                fleet.identity().name,
                fleet.identity().fingerprint
            );
        }
    }
    let to_terminal = std::io::stdout().is_terminal();
    println!("{}", sign_in_hint(&server, &token_file, to_terminal));
    tokio::select! {
        result = server.wait() => result?,
        _ = shutdown_signal() => {
            eprintln!("rigdeck: stopping");
            server.shutdown().await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How to sign in. On a terminal, the URL that carries the token; otherwise (a service, whose
/// output lands in the journal that more than the user may read) only where the token is.
fn sign_in_hint(server: &RunningServer, token_file: &Path, to_terminal: bool) -> String {
    if to_terminal {
        return format!("Open this URL to sign in: {}", server.login_url());
    }
    format!(
        "Sign in at {}/ with the token in {} (the sign-in URL with the token is printed only to a terminal)",
        server.base_url(),
        token_file.display()
    )
}

/// Ctrl-C or SIGTERM (systemd's stop).
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
