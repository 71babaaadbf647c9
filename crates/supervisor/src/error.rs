//! The supervisor's error type: each message names the thing that is wrong and how to fix it.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// Why the supervisor could not start, stop, adopt or wait for an engine.
#[derive(Debug, Error)]
pub enum SuperviseError {
    #[error("engine name '{name}' is not usable: {reason}; use letters, digits, '-', '_' or '.'")]
    BadName { name: String, reason: &'static str },

    #[error("engine program '{}' {problem}: {fix}", path.display())]
    BadProgram {
        path: PathBuf,
        problem: &'static str,
        fix: &'static str,
    },

    #[error(
        "health URL '{url}' is not usable: {reason}; write it like http://127.0.0.1:8080/health"
    )]
    BadHealthUrl { url: String, reason: String },

    #[error("launch spec for '{name}' is not usable: {reason}")]
    BadSpec { name: String, reason: String },

    #[error("working folder '{}' for '{name}' does not exist or is not a folder: create it or fix the profile", path.display())]
    BadWorkingDir { name: String, path: PathBuf },

    #[error("could not create the {what} folder '{}': {source}; check its permissions and free disk space", path.display())]
    Folder {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error("could not open the log file '{}': {source}; check the log folder's permissions and free disk space", path.display())]
    LogFile { path: PathBuf, source: io::Error },

    #[error("could not create the output file '{}': {source}; check the run folder's permissions and free disk space", path.display())]
    OutputFile { path: PathBuf, source: io::Error },

    #[error("could not start '{}' for '{name}': {source}", program.display())]
    Spawn {
        name: String,
        program: PathBuf,
        source: io::Error,
    },

    #[error("could not write the pid file '{}': {source}; without it an engine could outlive Rigdeck unnoticed, so it was not started", path.display())]
    PidFile { path: PathBuf, source: io::Error },

    #[error("could not read the run folder '{}': {source}", path.display())]
    RunDir { path: PathBuf, source: io::Error },

    #[error("an engine named '{name}' is already running (pid {pid}): stop it first or pick another name")]
    AlreadyRunning { name: String, pid: u32 },

    #[error("an engine named '{name}' from an earlier run is still alive (pid {pid}): adopt it or clean it up first (see Supervisor::recover)")]
    OrphanAlive { name: String, pid: i32 },

    #[error("process group {pgid} of '{name}' still has processes {pids:?} after SIGKILL: they are probably stuck in the kernel (state D); check `ps -o pid,stat,cmd -g {pgid}`")]
    StillRunning {
        name: String,
        pgid: i32,
        pids: Vec<i32>,
    },

    #[error("the supervisor that started '{name}' is gone while its processes {pids:?} still run: use Supervisor::recover to adopt or clean them up")]
    Detached { name: String, pids: Vec<i32> },

    #[error("'{name}' did not reach the expected state within {} ms; it is {state}", waited.as_millis())]
    WaitTimedOut {
        name: String,
        waited: Duration,
        state: String,
    },
}
