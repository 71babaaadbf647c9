//! Pid files: one JSON file per running engine in the run folder, so that a daemon that crashed
//! or was killed finds its engines again on the next start instead of leaving them holding VRAM.
//!
//! A pid alone is not an identity (the kernel reuses pids), so the file also records the
//! process's start time from `/proc/<pid>/stat`; a live pid with another start time is a stranger.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::process::{live_group_members, proc_stat};

/// What the supervisor remembers about one engine it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidRecord {
    pub name: String,
    pub pid: i32,
    /// Always equal to `pid`: engines lead their own group.
    pub pgid: i32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks after boot).
    pub start_time: u64,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub health_url: String,
    pub stop_timeout_ms: u64,
    pub started_at_ms: i64,
}

impl PidRecord {
    /// The recorded pid runs and is the very process that was started (same start time).
    pub fn leader_alive(&self) -> bool {
        proc_stat(self.pid).is_some_and(|s| s.is_running() && s.start_time == self.start_time)
    }

    /// Running processes of the recorded group.
    ///
    /// A group id is the pid of the process that created the group, and the kernel does not
    /// reuse a pid while a group of that id has members. So: if the recorded pid now belongs to
    /// another process (other start time), the group is not ours. If the leader is gone, its
    /// remaining members are ours, as long as they started after it (a guard against the rare
    /// case where the group emptied, and its id was reused and emptied again since).
    pub fn live_members(&self) -> Vec<i32> {
        match proc_stat(self.pid) {
            Some(stat) if stat.start_time != self.start_time => Vec::new(),
            Some(stat) if stat.is_running() => live_group_members(self.pgid),
            _ => live_group_members(self.pgid)
                .into_iter()
                .filter(|&pid| proc_stat(pid).is_some_and(|s| s.start_time >= self.start_time))
                .collect(),
        }
    }
}

/// `<run_dir>/<name>.json`.
pub fn path_for(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join(format!("{name}.json"))
}

/// Writes the record atomically (temporary file, then rename): a daemon killed mid-write leaves
/// the old file or the new one, never half of one. Only the user may read it (it holds argv).
pub(crate) fn write(run_dir: &Path, record: &PidRecord) -> io::Result<PathBuf> {
    let path = path_for(run_dir, &record.name);
    let temporary = run_dir.join(format!(".{}.json.tmp", record.name));
    let json = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(&json)?;
    file.sync_all()?;
    fs::rename(&temporary, &path)?;
    Ok(path)
}

/// Removes a pid file; one that is already gone is fine.
pub(crate) fn remove(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => tracing::warn!(path = %path.display(), error = %err, "cannot remove pid file"),
    }
}

/// Reads one pid file.
pub(crate) fn read(path: &Path) -> io::Result<PidRecord> {
    let text = fs::read(path)?;
    serde_json::from_slice(&text).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
}

/// The pid files in `run_dir` (none if the folder does not exist yet).
pub(crate) fn list(run_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(run_dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let is_pid_file = path.extension().is_some_and(|e| e == "json")
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.'));
        if is_pid_file {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, pid: i32, start_time: u64) -> PidRecord {
        PidRecord {
            name: name.into(),
            pid,
            pgid: pid,
            start_time,
            program: "/bin/sleep".into(),
            args: vec!["60".into()],
            health_url: "http://127.0.0.1:1/health".into(),
            stop_timeout_ms: 1000,
            started_at_ms: 0,
        }
    }

    #[test]
    fn round_trips_and_lists_only_pid_files() {
        let dir = tempfile::tempdir().unwrap();
        let written = write(dir.path(), &record("a", 10, 5)).unwrap();
        fs::write(dir.path().join("notes.txt"), "x").unwrap();
        fs::write(dir.path().join(".b.json.tmp"), "x").unwrap();
        assert_eq!(list(dir.path()).unwrap(), vec![written.clone()]);
        assert_eq!(read(&written).unwrap(), record("a", 10, 5));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&written).unwrap().permissions().mode() & 0o777,
            0o600
        );
        remove(&written);
        remove(&written);
        assert!(list(dir.path()).unwrap().is_empty());
        assert!(list(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn identity_needs_the_start_time() {
        let me = i32::try_from(std::process::id()).unwrap();
        let start = proc_stat(me).unwrap().start_time;
        assert!(record("me", me, start).leader_alive());
        assert!(!record("me", me, start + 1).leader_alive());
    }
}
