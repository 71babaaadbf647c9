//! `rigdeck` / `rigdeck desktop`: opens the desktop app, which is its own binary
//! (`rigdeck-desktop`) so that the headless daemon does not need GTK and WebKit to run.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Debug, Default, clap::Args)]
pub struct DesktopArgs {
    /// Manage another rig: the URL of its `rigdeck serve` (e.g. http://gpubox:7878).
    #[arg(long, value_name = "URL", requires = "token")]
    pub remote: Option<String>,
    /// The remote rig's token (its ~/.config/rigdeck/token).
    #[arg(long, env = "RIGDECK_REMOTE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

pub fn run(args: DesktopArgs) -> anyhow::Result<ExitCode> {
    if !has_display() {
        if args.remote.is_some() {
            anyhow::bail!("no display found (DISPLAY and WAYLAND_DISPLAY are unset): open the remote rig's URL in a browser instead");
        }
        eprintln!("No display found: starting the headless daemon instead (`rigdeck serve`).");
        return super::serve::run(default_serve_args());
    }
    let Some(binary) = desktop_binary() else {
        anyhow::bail!(
            "the desktop app is not installed (no `rigdeck-desktop` next to this `rigdeck` or on PATH): \
             build it with `make build`, or run `rigdeck serve` and open its URL in a browser"
        );
    };
    let mut command = Command::new(&binary);
    if let (Some(url), Some(token)) = (&args.remote, &args.token) {
        command
            .arg("--remote")
            .arg(url)
            .env("RIGDECK_REMOTE_TOKEN", token);
    }
    // Replace this process, so the window's lifetime is the command's lifetime.
    use std::os::unix::process::CommandExt;
    let err = command.exec();
    Err(anyhow::Error::new(err).context(format!("cannot start {}", binary.display())))
}

fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

fn default_serve_args() -> super::serve::ServeArgs {
    super::serve::ServeArgs {
        bind: crate::running::DEFAULT_BIND
            .parse()
            .unwrap_or_else(|_| ([127, 0, 0, 1], 7878).into()),
        allow_hosts: Vec::new(),
        gateway_bind: None,
        fleet_bind: None,
    }
}

/// Next to this executable first (an install or a build folder), then on PATH.
fn desktop_binary() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()?
        .parent()?
        .join("rigdeck-desktop");
    if beside.is_file() {
        return Some(beside);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("rigdeck-desktop"))
        .find(|p| p.is_file())
}
