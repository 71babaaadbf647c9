//! `rigdeck-desktop`: Rigdeck's desktop window. It starts the Rigdeck server in this process on a
//! free loopback port and shows its web UI in a native window (or, with `--remote URL`, shows
//! another machine's `rigdeck serve`). One instance per user: a second launch brings the first
//! window to the front.

mod backend;
mod instance;
mod locale;
mod shell;
mod target;

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use rigdeck_core::paths::AppPaths;
use rigdeck_server::ServeOptions;
use tauri::Url;
use tokio::signal::unix::{signal, SignalKind};

use crate::instance::Claim;
use crate::shell::{Session, Shell};
use crate::target::Target;

#[derive(Debug, Parser)]
#[command(
    name = "rigdeck-desktop",
    version,
    about = "Rigdeck's desktop window (usually started by `rigdeck`)"
)]
struct Args {
    /// Show another rig instead of this machine: the URL of its `rigdeck serve` (e.g. http://gpubox:7878).
    #[arg(long, value_name = "URL")]
    remote: Option<String>,
    /// The remote rig's token (its ~/.config/rigdeck/token). Prefer the environment variable:
    /// a command-line argument is visible to other users in `ps`.
    #[arg(long, env = "RIGDECK_REMOTE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    rigdeck_server::cli::init_logging();
    match run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("rigdeck-desktop: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let target = Target::from_args(args.remote.as_deref(), args.token.as_deref())?;
    let paths = AppPaths::from_env()?;

    // Before anything heavy: a second launch only pokes the first one and leaves.
    let lock_dir = instance::runtime_dir(&paths.config_dir);
    let lock_name = match &target {
        // Keyed by the config folder, so side-by-side installs (RIGDECK_CONFIG_DIR) do not collide.
        Target::Local => instance::lock_name("local", &paths.config_dir.to_string_lossy()),
        Target::Remote { base, .. } => instance::lock_name("remote", base.as_str()),
    };
    let mut owner = match instance::claim(&lock_dir, &lock_name)? {
        Claim::Owner(owner) => owner,
        Claim::Forwarded => {
            println!("Rigdeck is already open; brought its window to the front");
            return Ok(ExitCode::SUCCESS);
        }
    };

    if !has_display() {
        anyhow::bail!(
            "no display found (DISPLAY and WAYLAND_DISPLAY are unset): run `rigdeck serve` and open its URL in a browser"
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rigdeck-desktop")
        .build()
        .context("cannot start the async runtime")?;
    // Tauri's async helpers and the server then share this one runtime.
    tauri::async_runtime::set(runtime.handle().clone());
    let signals = {
        let _guard = runtime.enter();
        vec![
            (
                "SIGTERM",
                signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            ),
            (
                "SIGINT",
                signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
            ),
        ]
    };

    // GTK first: a display that cannot be opened fails before the server starts.
    let shell = Shell::new(signals)?;

    let (start_url, backend) = match target {
        Target::Local => {
            let options = ServeOptions::from_env(([127, 0, 0, 1], 0).into())?;
            let server = runtime
                .block_on(rigdeck_server::start(options))
                .context("cannot start the Rigdeck server")?;
            // The smoke test and curious users read this line.
            println!("Rigdeck desktop: serving on {}", server.base_url());
            let start_url = Url::parse(&server.login_url())
                .context("the server gave an invalid sign-in URL")?;
            (start_url, Some(backend::spawn(runtime.handle(), server)))
        }
        Target::Remote { base, login_url } => {
            println!("Rigdeck desktop: showing the remote rig at {base}");
            if base.scheme() == "http" && !is_loopback(&base) {
                eprintln!(
                    "Note: {base} is plain http, so the token travels unencrypted; prefer https (a reverse proxy) \
                     or an SSH tunnel on untrusted networks."
                );
            }
            (login_url, None)
        }
    };

    let (backend, backend_task, server_failed) = match backend {
        Some((backend, task, failed)) => (Some(backend), Some(task), Some(failed)),
        None => (None, None, None),
    };
    let code = shell.run(Session {
        start_url,
        backend: backend.clone(),
        server_failed,
        focus_server: owner.take_focus_server(),
    });

    // Whatever ended the window (closed, Quit, a signal, an error), stop the server before leaving
    // so its history is flushed and no listener is left behind.
    if let (Some(backend), Some(task)) = (backend, backend_task) {
        backend.request_shutdown();
        runtime.block_on(task.join());
    }
    // What is left on the runtime (the signal watchers) need not finish.
    runtime.shutdown_timeout(Duration::from_secs(2));
    // Release the instance lock only now, so a new launch never overlaps with this server.
    drop(owner);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|value| !value.is_empty()))
}

fn is_loopback(url: &Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        // IPv6 hosts come back in brackets.
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}
