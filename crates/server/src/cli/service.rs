//! `rigdeck service install|uninstall|status|unit`: the daemon under systemd, for headless rigs.
//! A user service by default (runs as you; at boot too once lingering is on), or a system one
//! with `--system` (as root; runs as the named user with their own folders). Installing checks
//! that systemd answers first and takes back what it wrote when enabling fails, so nothing is
//! left half-installed; removal leaves the user's data where it is.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use rigdeck_core::paths::AppPaths;
use rigdeck_core::service_unit::{unit, Scope, ServiceSpec, UNIT_NAME};

use crate::running::DEFAULT_BIND;

#[derive(Debug, clap::Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    pub command: ServiceCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ServiceCommand {
    /// Write the unit, enable it and start it now.
    Install(InstallArgs),
    /// Stop and disable the service and remove its unit; your data stays.
    Uninstall(ScopeArgs),
    /// Whether the service is installed, enabled and running.
    Status(ScopeArgs),
    /// Print the unit instead of installing it (to read it, or adapt it for another init).
    Unit(InstallArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ScopeArgs {
    /// The system's systemd (as root) instead of your user's.
    #[arg(long)]
    pub system: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct InstallArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Where the daemon listens. Anything but loopback is reachable from the network (the
    /// token is still needed); the URL and the token are printed.
    #[arg(long, default_value = DEFAULT_BIND, value_name = "IP:PORT")]
    pub bind: SocketAddr,
    /// Also serve the gateway alone here (API keys), e.g. 0.0.0.0:8080 for the LAN's tools.
    #[arg(long, value_name = "IP:PORT")]
    pub gateway_bind: Option<SocketAddr>,
    /// Also listen for paired Rigdeck daemons (the fleet's mutual-TLS channel) here, as
    /// `rigdeck serve --fleet-bind` does: 127.0.0.1:7879 for SSH tunnels, a LAN or VPN address.
    #[arg(long, value_name = "IP:PORT")]
    pub fleet_bind: Option<SocketAddr>,
    /// With --system: the user it runs as (default: the one who ran sudo).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
}

pub fn run(args: ServiceArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ServiceCommand::Install(args) => install(&args),
        ServiceCommand::Uninstall(scope) => uninstall(&scope),
        ServiceCommand::Status(scope) => status(&scope),
        ServiceCommand::Unit(args) => {
            let (text, _) = unit_for(&args)?;
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The unit's text and the folders it uses.
fn unit_for(args: &InstallArgs) -> anyhow::Result<(String, AppPaths)> {
    let program = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot tell where this rigdeck binary is")?;
    let (scope, paths) = if args.scope.system {
        let user = args
            .user
            .clone()
            .or_else(|| std::env::var("SUDO_USER").ok())
            .filter(|u| !u.is_empty() && u != "root")
            .ok_or_else(|| {
                anyhow::anyhow!("a system service runs as a user: name one with --user NAME (or run it with sudo from that user)")
            })?;
        let home = home_of(&user)?;
        let paths = AppPaths {
            config_dir: home.join(".config/rigdeck"),
            data_dir: home.join(".local/share/rigdeck"),
        };
        (Scope::System { user }, paths)
    } else {
        (Scope::User, AppPaths::from_env()?)
    };
    let spec = ServiceSpec {
        program: &program,
        bind: args.bind,
        gateway_bind: args.gateway_bind,
        fleet_bind: args.fleet_bind,
        paths: &paths,
        scope,
    };
    Ok((unit(&spec), paths))
}

/// The home folder `/etc/passwd` gives a user.
fn home_of(user: &str) -> anyhow::Result<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").context("cannot read /etc/passwd")?;
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&user) && fields.len() >= 6)
        .map(|fields| PathBuf::from(fields[5]))
        .ok_or_else(|| anyhow::anyhow!("no user named '{user}' on this machine (/etc/passwd): check the name given to --user"))
}

fn unit_dir(system: bool) -> anyhow::Result<PathBuf> {
    if system {
        return Ok(PathBuf::from("/etc/systemd/system"));
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
        .ok_or_else(|| anyhow::anyhow!("cannot find your config folder: set HOME"))?;
    Ok(config.join("systemd/user"))
}

/// `systemctl [--user] ARGS`: its output when it succeeds, its message when it does not.
fn systemctl(system: bool, args: &[&str]) -> Result<String, String> {
    let mut command = Command::new("systemctl");
    if !system {
        command.arg("--user");
    }
    let output = command
        .args(args)
        .output()
        .map_err(|err| format!("cannot run systemctl ({err}): this machine has no systemd"))?;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    if output.status.success() {
        Ok(text(&output.stdout))
    } else {
        Err(match text(&output.stderr) {
            message if message.is_empty() => text(&output.stdout),
            message => message,
        })
    }
}

fn install(args: &InstallArgs) -> anyhow::Result<ExitCode> {
    let system = args.scope.system;
    // systemd must answer before anything is written.
    if let Err(why) = systemctl(system, &["show-environment"]) {
        bail!(
            "systemd does not answer here ({why}): start the daemon with your init system or in a terminal (`rigdeck serve`; `rigdeck service unit` prints a unit to adapt); nothing was installed"
        );
    }
    let (text, paths) = unit_for(args)?;
    let dir = unit_dir(system)?;
    let path = dir.join(UNIT_NAME);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create '{}'", dir.display()))?;
    write_atomically(&path, &text)?;
    let enabled = systemctl(system, &["daemon-reload"])
        .and_then(|_| systemctl(system, &["enable", "--now", UNIT_NAME]));
    if let Err(why) = enabled {
        let _ = std::fs::remove_file(&path);
        let _ = systemctl(system, &["daemon-reload"]);
        bail!("systemd could not enable and start {UNIT_NAME} ({why}); the unit was removed again");
    }
    let kind = if system { "system" } else { "user" };
    println!(
        "Rigdeck runs as a systemd {kind} service ({}).",
        path.display()
    );
    println!(
        "Logs: journalctl {}-u rigdeck -f",
        if system { "" } else { "--user " }
    );
    print_address(args.bind, &paths);
    if !system {
        linger_hint();
    }
    Ok(ExitCode::SUCCESS)
}

/// The address to open; beyond loopback, the URL and the token, since this was asked for.
fn print_address(bind: SocketAddr, paths: &AppPaths) {
    let token_file = paths.token_file();
    if bind.ip().is_loopback() {
        println!(
            "Open http://{bind} (the token is in {}).",
            token_file.display()
        );
        return;
    }
    let token = std::fs::read_to_string(&token_file).unwrap_or_default();
    let host = if bind.ip().is_unspecified() {
        "<this machine's address>".to_owned()
    } else {
        bind.ip().to_string()
    };
    println!("WARNING: the daemon is reachable from the network on {bind}.");
    match token.trim() {
        "" => println!(
            "Open http://{host}:{}/ and sign in with the token the daemon writes to {}.",
            bind.port(),
            token_file.display()
        ),
        token => println!("Open http://{host}:{}/login?token={token}", bind.port()),
    }
}

/// A user service stops when the user logs out unless lingering is on.
fn linger_hint() {
    let user = std::env::var("USER").unwrap_or_default();
    let linger = Command::new("loginctl")
        .args(["show-user", &user, "--property=Linger"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    if linger != "Linger=yes" {
        println!(
            "To start it at boot and keep it running after you log out: sudo loginctl enable-linger {user}"
        );
    }
}

fn uninstall(scope: &ScopeArgs) -> anyhow::Result<ExitCode> {
    let path = unit_dir(scope.system)?.join(UNIT_NAME);
    if !path.exists() {
        println!(
            "{} is not installed ({} does not exist).",
            UNIT_NAME,
            path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(why) = systemctl(scope.system, &["disable", "--now", UNIT_NAME]) {
        eprintln!("systemd could not stop it ({why}); removing the unit anyway");
    }
    std::fs::remove_file(&path).with_context(|| format!("cannot remove '{}'", path.display()))?;
    let _ = systemctl(scope.system, &["daemon-reload"]);
    println!(
        "Removed {}. Your data (database, settings, token, engine builds, downloaded models) stays where it was.",
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn status(scope: &ScopeArgs) -> anyhow::Result<ExitCode> {
    let path = unit_dir(scope.system)?.join(UNIT_NAME);
    if !path.exists() {
        println!(
            "not installed ({} does not exist): `rigdeck service install`",
            path.display()
        );
        return Ok(ExitCode::from(3));
    }
    let state = |what: &str| systemctl(scope.system, &[what, UNIT_NAME]).unwrap_or_else(|e| e);
    let (enabled, active) = (state("is-enabled"), state("is-active"));
    println!(
        "unit: {}\nenabled: {enabled}\nactive: {active}",
        path.display()
    );
    Ok(if active == "active" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("service.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write '{}'", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write '{}'", path.display()))
}
