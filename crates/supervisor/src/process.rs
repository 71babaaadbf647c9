//! Starting an engine in a process group of its own, and inspecting, signalling and ending that
//! group through `/proc` and `killpg`.
//!
//! The group is what gets stopped, not just the engine's pid: engines spawn helpers (vLLM's
//! worker processes, a wrapper script's child), and any of them can hold GPU memory.

use std::fs;
use std::io;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout_at, Instant};

use super::output::Files;
use super::spec::LaunchSpec;

/// How often the group is looked at while waiting for it to go.
const GROUP_POLL: Duration = Duration::from_millis(25);

/// How long SIGKILLed processes get to disappear; they only linger if stuck in the kernel.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Spawns the engine straight from its argv vector (no shell), in a new process group whose id
/// is the engine's pid, writing its stdout and stderr to `output` (files, not pipes to the
/// daemon: see `output`). The child is not killed when its handle drops: the supervisor decides
/// when engines end, and one that outlives a crashed daemon is found again through its pid file.
pub(crate) fn spawn(spec: &LaunchSpec, output: Files) -> io::Result<Child> {
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(output.stdout)
        .stderr(output.stderr)
        .process_group(0)
        .kill_on_drop(false);
    if let Some(dir) = &spec.working_dir {
        command.current_dir(dir);
    }
    command.spawn()
}

/// The few fields of `/proc/<pid>/stat` the supervisor needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// `R`, `S`, `D`, `Z` (zombie) …
    pub state: char,
    pub pgrp: i32,
    /// Clock ticks after boot when the process started (field 22): with the pid, it identifies a
    /// process even after the pid number has been reused.
    pub start_time: u64,
}

impl ProcStat {
    /// A zombie has exited and only waits to be reaped: it holds no memory and runs nothing.
    pub fn is_running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Reads `/proc/<pid>/stat`; `None` if the process does not exist (or the file is unreadable).
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses a stat line. The command name (field 2) is in parentheses and may itself contain
/// spaces and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // fields[0] is field 3 of proc(5), so field N is fields[N - 3].
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// Pids of the processes in group `pgid` that still run (zombies excluded), found by scanning
/// `/proc`: this also sees grandchildren, and unlike `killpg(pgid, 0)` it is not fooled by
/// zombies that nobody has reaped yet.
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|s| s.pgrp == pgid && s.is_running()))
        .collect()
}

/// Sends `signal` to every process of group `pgid`. `Ok(false)` when the group no longer exists.
/// Refuses group ids that would hit init, everything, or the supervisor's own group.
pub(crate) fn signal_group(pgid: i32, signal: i32) -> io::Result<bool> {
    // SAFETY: getpgrp has no preconditions and cannot fail.
    let own_group = unsafe { libc::getpgrp() };
    if pgid <= 1 || pgid == own_group {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: killpg only sends a signal; it has no memory-safety preconditions.
    if unsafe { libc::killpg(pgid, signal) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// What ending a group took, and what is left of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Termination {
    /// SIGTERM was not enough: the group got SIGKILL.
    pub killed: bool,
    /// Pids still running afterwards (normally none).
    pub left: Vec<i32>,
}

/// Ends group `pgid`: SIGTERM, up to `grace` for it to go, then SIGKILL. Reaps `child` (the
/// group leader) when we own it.
pub(crate) async fn terminate_group(
    pgid: i32,
    mut child: Option<&mut Child>,
    grace: Duration,
) -> Termination {
    // Signal only a group that still has members: once it is empty its id may be reused.
    if live_group_members(pgid).is_empty() {
        if let Some(child) = child {
            // Reap a leader that already exited (bounded, in case it left the group instead).
            let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
        }
        return Termination {
            killed: false,
            left: Vec::new(),
        };
    }
    send(pgid, libc::SIGTERM);
    if wait_group_gone(pgid, child.as_deref_mut(), grace).await {
        return Termination {
            killed: false,
            left: Vec::new(),
        };
    }
    send(pgid, libc::SIGKILL);
    wait_group_gone(pgid, child, KILL_WAIT).await;
    Termination {
        killed: true,
        left: live_group_members(pgid),
    }
}

fn send(pgid: i32, signal: i32) {
    if let Err(err) = signal_group(pgid, signal) {
        tracing::warn!(pgid, signal, error = %err, "cannot signal engine process group");
    }
}

/// Waits until the leader is reaped (if ours) and no member of the group runs any more.
async fn wait_group_gone(pgid: i32, child: Option<&mut Child>, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    if let Some(child) = child {
        // Reaping promptly matters: an unreaped leader keeps its pid (and group id) reserved.
        let _ = timeout_at(deadline, child.wait()).await;
    }
    loop {
        if live_group_members(pgid).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(GROUP_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_even_with_odd_command_names() {
        let line = "4242 (llama (srv) x) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 3 0 987654 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                state: 'S',
                pgrp: 4242,
                start_time: 987_654
            }
        );
        assert!(stat.is_running());
        assert_eq!(parse_stat("12 (x) Z 1"), None);
    }

    #[test]
    fn reads_our_own_process() {
        let me = i32::try_from(std::process::id()).unwrap();
        let stat = proc_stat(me).unwrap();
        // SAFETY: getpgrp cannot fail.
        assert_eq!(stat.pgrp, unsafe { libc::getpgrp() });
        assert!(stat.start_time > 0 && stat.is_running());
    }

    #[test]
    fn refuses_dangerous_group_ids() {
        // SAFETY: getpgrp cannot fail.
        let own = unsafe { libc::getpgrp() };
        for pgid in [-1, 0, 1, own] {
            assert_eq!(
                signal_group(pgid, 0).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
    }
}
