//! The daemon as a systemd service (`rigdeck service install`): the unit's text, for the user's
//! own systemd (starts with their session, or at boot with lingering) or the system's (a `User=`
//! line, the user's own folders, so the desktop app and the service share one database). Pure:
//! writing, enabling and starting it is the command line's job.

use std::net::SocketAddr;
use std::path::Path;

use crate::launch::export::{specifiers_escaped, systemd_word, Dollar};
use crate::paths::AppPaths;

/// Which systemd instance runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// `systemctl --user`: runs as the user, while they are logged in or lingering.
    User,
    /// The system's: starts at boot, runs as `user`.
    System { user: String },
}

/// What the service runs.
#[derive(Debug, Clone)]
pub struct ServiceSpec<'a> {
    /// The `rigdeck` binary, absolute.
    pub program: &'a Path,
    pub bind: SocketAddr,
    pub gateway_bind: Option<SocketAddr>,
    /// The fleet's mutual-TLS listener, for a rig that desks pair with.
    pub fleet_bind: Option<SocketAddr>,
    pub paths: &'a AppPaths,
    pub scope: Scope,
}

/// The unit file's name.
pub const UNIT_NAME: &str = "rigdeck.service";

/// The unit. Every word goes through the same quoting as the profiles' exported units.
pub fn unit(spec: &ServiceSpec<'_>) -> String {
    let mut args = vec![
        spec.program.display().to_string(),
        "serve".to_owned(),
        "--bind".to_owned(),
        spec.bind.to_string(),
    ];
    if let Some(gateway) = spec.gateway_bind {
        args.extend(["--gateway-bind".to_owned(), gateway.to_string()]);
    }
    if let Some(fleet) = spec.fleet_bind {
        args.extend(["--fleet-bind".to_owned(), fleet.to_string()]);
    }
    let exec: Vec<String> = args
        .iter()
        .map(|w| systemd_word(w, Dollar::Expanded))
        .collect();
    let env = |key: &str, value: &Path| {
        let pair = format!("{key}={}", value.display());
        format!("Environment={}\n", systemd_word(&pair, Dollar::Literal))
    };
    let mut out = String::from("[Unit]\n");
    out.push_str(
        "Description=Rigdeck: GPU telemetry, model engines and the OpenAI-compatible gateway\n",
    );
    out.push_str("After=network-online.target\nWants=network-online.target\n");
    // A daemon that cannot start (its port taken at boot) is retried a few times, then left
    // failed, so `rigdeck service status` shows why instead of a restart every few seconds.
    out.push_str("StartLimitIntervalSec=120\nStartLimitBurst=5\n");
    out.push_str("\n[Service]\nType=simple\n");
    if let Scope::System { user } = &spec.scope {
        out.push_str(&format!("User={}\n", specifiers_escaped(user)));
    }
    out.push_str(&env("RIGDECK_CONFIG_DIR", &spec.paths.config_dir));
    out.push_str(&env("RIGDECK_DATA_DIR", &spec.paths.data_dir));
    out.push_str(&format!("ExecStart={}\n", exec.join(" ")));
    out.push_str("Restart=on-failure\nRestartSec=5\n");
    // On SIGTERM the daemon stops the engines it started and waits for their memory to be
    // freed; a big model can take a while. What is left after that is killed.
    out.push_str("KillMode=mixed\nTimeoutStopSec=90\n");
    let target = match spec.scope {
        Scope::User => "default.target",
        Scope::System { .. } => "multi-user.target",
    };
    out.push_str(&format!("\n[Install]\nWantedBy={target}\n"));
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::launch::export::assert_systemd_accepts;

    fn paths() -> AppPaths {
        AppPaths {
            config_dir: PathBuf::from("/home/ana/.config/rigdeck"),
            data_dir: PathBuf::from("/home/ana/my models %data/rigdeck"),
        }
    }

    #[test]
    fn a_user_unit_serves_on_loopback_and_restarts_on_failure() {
        let paths = paths();
        let spec = ServiceSpec {
            program: Path::new("/bin/true"),
            bind: "127.0.0.1:7878".parse().unwrap(),
            gateway_bind: Some("0.0.0.0:8080".parse().unwrap()),
            fleet_bind: Some("192.168.1.20:7879".parse().unwrap()),
            paths: &paths,
            scope: Scope::User,
        };
        let text = unit(&spec);
        assert!(text.contains(
            "ExecStart=/bin/true serve --bind 127.0.0.1:7878 --gateway-bind 0.0.0.0:8080 --fleet-bind 192.168.1.20:7879\n"
        ));
        assert!(
            text.contains("Environment=\"RIGDECK_DATA_DIR=/home/ana/my models %%data/rigdeck\"\n")
        );
        assert!(
            text.contains("Restart=on-failure\n") && text.contains("WantedBy=default.target\n")
        );
        assert!(!text.contains("User="));
        assert_systemd_accepts(UNIT_NAME, &text);
    }

    #[test]
    fn a_system_unit_runs_as_the_user_at_boot() {
        let paths = paths();
        let spec = ServiceSpec {
            program: Path::new("/bin/true"),
            bind: "0.0.0.0:7878".parse().unwrap(),
            gateway_bind: None,
            fleet_bind: None,
            paths: &paths,
            scope: Scope::System { user: "ana".into() },
        };
        let text = unit(&spec);
        assert!(text.contains("User=ana\n") && text.contains("WantedBy=multi-user.target\n"));
        assert!(text.contains("--bind 0.0.0.0:7878\n") && !text.contains("--fleet-bind"));
        assert_systemd_accepts(UNIT_NAME, &text);
    }
}
