//! What to launch: the argv vector, environment, health endpoint, timeouts and restart policy,
//! and the checks that turn a hand-made or stored spec into one the supervisor can trust.
//!
//! The spec is deliberately an argv vector: nothing here is ever joined into a shell command
//! line, so a model path with spaces or a `;` in an argument stays one literal argument.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::SuperviseError;
use super::health::HealthUrl;

/// Longest engine name accepted. The name becomes a file name (`<name>.log`, `<name>.json`).
const MAX_NAME_LEN: usize = 64;

/// Everything needed to start one engine process and judge whether it is healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Unique among running processes; names the log file and the pid file.
    pub name: String,
    /// Absolute path to the engine executable (never looked up in `PATH`).
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Added to the supervisor's own environment (`CUDA_VISIBLE_DEVICES`, …).
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    pub health: HealthCheck,
    /// How long a stopping engine gets after SIGTERM before its group is SIGKILLed.
    pub stop_timeout: Duration,
    pub restart: RestartPolicy,
}

/// How readiness is judged: an HTTP GET that answers 200 means ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Plain `http://host:port/path`, e.g. `http://127.0.0.1:8080/health`.
    pub url: String,
    /// Give up (stop the engine, report `NeverHealthy`) if not ready by then.
    pub ready_timeout: Duration,
    pub poll_every: Duration,
    /// A process with no endpoint of its own (a headless follower of a multi-node engine): ready
    /// as soon as it runs, the URL never asked; its end is watched as any other's.
    pub process_only: bool,
}

/// What to do when the engine exits without being asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Never,
    /// Restart after a backoff that doubles from `initial_backoff` up to `max_backoff`, giving up
    /// after `max_restarts` consecutive failures (a long enough healthy run resets the count).
    OnFailure {
        max_restarts: u32,
        initial_backoff: Duration,
        max_backoff: Duration,
    },
}

impl LaunchSpec {
    /// A spec with the usual defaults: no extra arguments or environment, a ten-minute ready
    /// timeout (big models take minutes to load), polling twice a second, ten seconds to stop,
    /// and no restarts.
    pub fn new(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        health_url: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            working_dir: None,
            health: HealthCheck {
                url: health_url.into(),
                ready_timeout: Duration::from_secs(600),
                poll_every: Duration::from_millis(500),
                process_only: false,
            },
            stop_timeout: Duration::from_secs(10),
            restart: RestartPolicy::Never,
        }
    }

    /// Checks the spec and parses its health URL. Called once, before anything is spawned.
    pub(crate) fn validate(&self) -> Result<HealthUrl, SuperviseError> {
        check_name(&self.name)?;
        check_program(&self.program)?;
        self.check_strings()?;
        if let Some(dir) = &self.working_dir {
            if !dir.is_dir() {
                return Err(SuperviseError::BadWorkingDir {
                    name: self.name.clone(),
                    path: dir.clone(),
                });
            }
        }
        if self.health.poll_every.is_zero() || self.health.ready_timeout.is_zero() {
            return Err(self.bad("the health poll interval and ready timeout must be above zero"));
        }
        if let RestartPolicy::OnFailure {
            initial_backoff,
            max_backoff,
            ..
        } = self.restart
        {
            if max_backoff < initial_backoff {
                return Err(self.bad("the restart max_backoff is shorter than initial_backoff"));
            }
        }
        HealthUrl::parse(&self.health.url)
    }

    /// NUL bytes cannot cross `execve`; `=` in a variable name would silently change its meaning.
    fn check_strings(&self) -> Result<(), SuperviseError> {
        if let Some(arg) = self.args.iter().find(|a| a.contains('\0')) {
            return Err(self.bad(&format!("argument {arg:?} contains a NUL byte")));
        }
        for (key, value) in &self.env {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(self.bad(&format!(
                    "environment variable name {key:?} is empty or contains '=' or NUL"
                )));
            }
            if value.contains('\0') {
                return Err(self.bad(&format!("environment variable {key} contains a NUL byte")));
            }
        }
        Ok(())
    }

    fn bad(&self, reason: &str) -> SuperviseError {
        SuperviseError::BadSpec {
            name: self.name.clone(),
            reason: reason.to_string(),
        }
    }
}

/// Why `name` cannot name a process, if it cannot: the name ends up in file names, so it must
/// not be able to walk out of the run/log folders. Launch profiles use the same rule.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is longer than 64 characters")
    } else if name.starts_with('.') {
        Some("it starts with '.'")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Some("it contains characters other than letters, digits, '-', '_' and '.'")
    } else {
        None
    }
}

fn check_name(name: &str) -> Result<(), SuperviseError> {
    match name_problem(name) {
        Some(reason) => Err(SuperviseError::BadName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// An absolute path to an existing executable file; never resolved through `PATH`, so what runs
/// is exactly the build the user registered.
fn check_program(path: &Path) -> Result<(), SuperviseError> {
    let bad = |problem: &'static str, fix: &'static str| SuperviseError::BadProgram {
        path: path.to_path_buf(),
        problem,
        fix,
    };
    if !path.is_absolute() {
        return Err(bad(
            "is not an absolute path",
            "give the full path to the engine binary, e.g. /opt/llama.cpp/bin/llama-server",
        ));
    }
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(_) => {
            return Err(bad(
                "does not exist",
                "check that the engine build is still installed, or register it again",
            ))
        }
    };
    if !meta.is_file() {
        return Err(bad(
            "is not a file",
            "point the profile at the engine binary itself",
        ));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(bad(
            "is not executable",
            "make it executable (chmod +x) or rebuild the engine",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, program: &str) -> LaunchSpec {
        LaunchSpec::new(name, program, "http://127.0.0.1:8080/health")
    }

    #[test]
    fn accepts_a_plain_spec() {
        assert!(spec("llama-1", "/bin/sh").validate().is_ok());
    }

    #[test]
    fn names_that_could_escape_the_folder_are_refused() {
        for name in ["", "../x", "a/b", ".hidden", "with space", &"x".repeat(65)] {
            let err = spec(name, "/bin/sh").validate().unwrap_err();
            assert!(
                matches!(err, SuperviseError::BadName { .. }),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn program_must_be_an_absolute_existing_executable() {
        let relative = spec("a", "llama-server")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            relative.contains("'llama-server' is not an absolute path"),
            "{relative}"
        );
        let missing = spec("a", "/nonexistent/llama-server")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("'/nonexistent/llama-server' does not exist"),
            "{missing}"
        );
        let folder = spec("a", "/tmp").validate().unwrap_err().to_string();
        assert!(folder.contains("is not a file"), "{folder}");
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("model.gguf");
        std::fs::write(&plain, b"GGUF").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let not_exec = spec("a", plain.to_str().unwrap()).validate().unwrap_err();
        assert!(
            not_exec.to_string().contains("is not executable"),
            "{not_exec}"
        );
    }

    #[test]
    fn bad_environment_names_and_nul_bytes_are_refused() {
        let mut s = spec("a", "/bin/sh");
        s.env.push(("A=B".into(), "1".into()));
        assert!(matches!(s.validate(), Err(SuperviseError::BadSpec { .. })));
        let mut s = spec("a", "/bin/sh");
        s.args.push("x\0y".into());
        assert!(matches!(s.validate(), Err(SuperviseError::BadSpec { .. })));
    }

    #[test]
    fn backoff_bounds_and_intervals_are_checked() {
        let mut s = spec("a", "/bin/sh");
        s.restart = RestartPolicy::OnFailure {
            max_restarts: 1,
            initial_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(1),
        };
        assert!(matches!(s.validate(), Err(SuperviseError::BadSpec { .. })));
        let mut s = spec("a", "/bin/sh");
        s.health.poll_every = Duration::ZERO;
        assert!(matches!(s.validate(), Err(SuperviseError::BadSpec { .. })));
    }
}
