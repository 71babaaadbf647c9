//! An engine's output files: the engine writes its stdout and stderr straight into
//! `<run_dir>/<name>.stdout` and `<run_dir>/<name>.stderr`, and the daemon follows (tails) those
//! files into the process's [`LogBuffer`].
//!
//! Files rather than pipes, because an engine outlives the daemon that started it. A pipe's
//! reading end dies with the daemon: the engine's later output was lost, and its next write could
//! kill it (SIGPIPE) or fail (EPIPE). A file needs no reader. Each follower records how far it has
//! read in `<name>.stdout.offset` (`.stderr.offset`) about once a second and when it stops, and the
//! daemon that adopts the engine after a restart goes on from there: no line is lost, and a daemon
//! that crashed shows at most the last second's lines twice.
//!
//! Disk use: the engine holds its files open with `O_APPEND`, so they cannot be rotated like the
//! log file (the engine would go on writing into the renamed file) nor truncated (lines written
//! between the last read and the truncation would be lost). Instead the part already read and
//! recorded is handed back to the filesystem with `fallocate(PUNCH_HOLE)`: the file keeps its size
//! and every offset its meaning, so nothing races with the writer, but the blocks are freed. On a
//! filesystem that cannot punch holes the file grows (noted once in the daemon's log) until the
//! process ends and the file is removed.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, timeout, Instant};

use super::logs::{LineReader, LogBuffer, LogStream};
use super::task::{spawn_task, stop_requested, Task};

/// How often the follower looks for new output: load progress stays smooth, lines written to
/// both files keep roughly their order, and an idle engine costs two `read`s per look.
const POLL: Duration = Duration::from_millis(50);

/// How often the read offset is recorded: a daemon crash shows at most this much output twice.
const RECORD_EVERY: Duration = Duration::from_secs(1);

/// Read output is freed once this much has piled up, so a quiet engine costs no `fallocate`
/// calls and a chatty one keeps at most about this much (plus what is still unread) on disk.
const FREE_AFTER: u64 = 1024 * 1024;

/// Holes are punched in whole blocks: punching part of a block would only zero it.
const BLOCK: u64 = 4096;

/// Bytes per `read`.
const READ_CHUNK: usize = 64 * 1024;

/// Bytes per pass, after which the offset is recorded and space freed even when more is waiting,
/// so a follower that fell behind a chatty engine still keeps its record and disk use current.
const PASS_BYTES: usize = 1024 * 1024;

/// How long the followers get to read to the end of the files once the engine has exited.
const DRAIN_WAIT: Duration = Duration::from_millis(500);

/// The output files and the stream each one carries.
const STREAMS: [(LogStream, &str); 2] =
    [(LogStream::Stdout, "stdout"), (LogStream::Stderr, "stderr")];

/// The files a new engine process writes to.
pub(crate) struct Files {
    pub stdout: File,
    pub stderr: File,
}

/// Creates a new run's output files, empty (output of an earlier run was read to its end, or
/// belongs to an engine that is gone), with their offset records removed.
pub(crate) fn create(run_dir: &Path, name: &str) -> Result<Files, (PathBuf, io::Error)> {
    let open = |extension: &str| {
        let path = output_path(run_dir, name, extension);
        remove_file(&offset_path(&path));
        // A fresh file rather than a truncated one: `O_APPEND` and `O_TRUNC` do not combine.
        remove_file(&path);
        // Engine output can hold prompts, so only the user may read it.
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|err| (path, err))
    };
    Ok(Files {
        stdout: open("stdout")?,
        stderr: open("stderr")?,
    })
}

/// Whether the engine called `name` writes to output files (one started by an older Rigdeck
/// wrote to pipes instead).
pub(crate) fn present(run_dir: &Path, name: &str) -> bool {
    output_path(run_dir, name, "stdout").exists()
}

/// Removes the output files of `name` and their offset records; missing ones are fine.
pub(crate) fn remove(run_dir: &Path, name: &str) {
    for (_, extension) in STREAMS {
        let path = output_path(run_dir, name, extension);
        remove_file(&offset_path(&path));
        remove_file(&path);
    }
}

/// After the engine ended: removes its output files when the followers `drained` them, else
/// leaves them and notes in `logs` where the rest of the output is.
pub(crate) fn forget(run_dir: &Path, name: &str, drained: bool, logs: &LogBuffer) {
    if drained {
        remove(run_dir, name);
    } else {
        logs.push(
            LogStream::Supervisor,
            format!(
                "the output was not read to its end in time; the rest is in {} and .stderr",
                output_path(run_dir, name, "stdout").display()
            ),
        );
    }
}

/// `<run_dir>/<name>.stdout` or `.stderr`.
fn output_path(run_dir: &Path, name: &str, extension: &str) -> PathBuf {
    run_dir.join(format!("{name}.{extension}"))
}

/// `<output file>.offset`.
fn offset_path(output: &Path) -> PathBuf {
    let mut path = OsString::from(output.as_os_str());
    path.push(".offset");
    PathBuf::from(path)
}

fn remove_file(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(path = %path.display(), error = %err, "cannot remove engine output file");
        }
    }
}

/// Where followers start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartAt {
    /// A new run: its files are empty.
    Beginning,
    /// An adopted engine: where the last daemon recorded it had read to.
    Recorded,
}

/// The follower of one engine's output files; dropping this cancels it.
///
/// One task reads both files, stdout first, each round: lines the engine wrote to both within one
/// round ([`POLL`]) arrive stdout first, the others in the order they were written.
pub(crate) struct Followers {
    /// Taken by the first [`Followers::drain`].
    task: Option<Task>,
    finish: watch::Sender<bool>,
    drained: bool,
    catch_up: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

impl Followers {
    /// Starts following the output files of `name` that exist, into `logs` and `progress`.
    pub fn start(
        run_dir: &Path,
        name: &str,
        logs: &LogBuffer,
        progress: &watch::Sender<Option<f32>>,
        at: StartAt,
    ) -> Self {
        let mut files = Vec::new();
        for (stream, extension) in STREAMS {
            let path = output_path(run_dir, name, extension);
            let lines = LineReader::new(stream, logs.clone(), progress.clone());
            match Follower::open(path.clone(), lines, at) {
                Ok(follower) => files.push(follower),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "cannot follow engine output");
                }
            }
        }
        let (finish, finish_rx) = watch::channel(false);
        let (catch_up, requests) = mpsc::unbounded_channel();
        // Nothing to follow (an engine that writes to pipes of an older Rigdeck): no task.
        let task = (!files.is_empty()).then(|| spawn_task(follow(files, finish_rx, requests)));
        Self {
            drained: task.is_none(),
            task,
            finish,
            catch_up,
        }
    }

    /// Has the follower read what the files hold now, without waiting for its next look (at
    /// most [`DRAIN_WAIT`]): called before a process is published ready, so that what the
    /// engine printed until then is in the logs by then, as it was with pipes.
    pub async fn catch_up(&self) {
        let (done, caught_up) = oneshot::channel();
        if self.catch_up.send(done).is_ok() {
            let _ = timeout(DRAIN_WAIT, caught_up).await;
        }
    }

    /// Tells the follower that the engine has exited: it reads each file to its end, emits the
    /// unfinished last lines and stops. Waits at most [`DRAIN_WAIT`] (a follower still busy then
    /// is cancelled); true when it got to the end.
    pub async fn drain(&mut self) -> bool {
        self.finish.send_replace(true);
        if let Some(mut task) = self.task.take() {
            self.drained = task.join_by(Instant::now() + DRAIN_WAIT).await;
        }
        self.drained
    }
}

/// Follows `files` until `finish` says the engine has exited and every file is read to its end;
/// answers each catch-up request once it has read to the end after it.
async fn follow(
    mut files: Vec<Follower>,
    mut finish: watch::Receiver<bool>,
    mut catch_up: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        // Looked at before reading: output written before the exit is in the files by then.
        let finishing = *finish.borrow_and_update();
        let mut at_end = true;
        for file in &mut files {
            at_end &= file.read_pass(&mut buf).await;
            file.keep_up();
        }
        if !at_end {
            continue;
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
        if finishing {
            break;
        }
        tokio::select! {
            () = sleep(POLL) => {}
            () = stop_requested(&mut finish) => {}
            Some(done) = catch_up.recv() => waiting.push(done),
        }
    }
    for file in &mut files {
        file.lines.finish();
        file.record(file.read);
    }
}

/// Reads one output file as it grows.
struct Follower {
    path: PathBuf,
    offset_path: PathBuf,
    file: tokio::fs::File,
    lines: LineReader,
    /// Bytes of the file read so far (some may still wait in `lines` for their line's end).
    read: u64,
    /// The offset last written to the offset record.
    recorded: u64,
    recorded_at: Instant,
    record_failed: bool,
    /// Everything before this offset has been punched out.
    freed: u64,
    can_free: bool,
    /// A read failed: the file is not read any more.
    broken: bool,
}

impl Follower {
    fn open(path: PathBuf, lines: LineReader, at: StartAt) -> io::Result<Self> {
        // Writable only because punching holes needs it; nothing is written through it.
        let mut file = OpenOptions::new().read(true).write(true).open(&path)?;
        let offset_path = offset_path(&path);
        let start = match at {
            StartAt::Beginning => 0,
            StartAt::Recorded => read_offset(&offset_path),
        };
        // A record past the end belongs to another file of the same name: read this one whole.
        let start = if start > file.metadata()?.len() {
            0
        } else {
            start
        };
        file.seek(SeekFrom::Start(start))?;
        Ok(Self {
            path,
            offset_path,
            file: tokio::fs::File::from_std(file),
            lines,
            read: start,
            recorded: start,
            recorded_at: Instant::now(),
            record_failed: false,
            freed: 0,
            can_free: true,
            broken: false,
        })
    }

    /// Reads and emits what the file holds, up to [`PASS_BYTES`]; true when it got to the end
    /// (or cannot be read: the error is logged, and the file not read again).
    async fn read_pass(&mut self, buf: &mut [u8]) -> bool {
        if self.broken {
            return true;
        }
        match self.read_some(buf).await {
            Ok(at_end) => at_end,
            Err(err) => {
                self.broken = true;
                tracing::warn!(path = %self.path.display(), error = %err, "cannot read engine output");
                true
            }
        }
    }

    async fn read_some(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let mut passed = 0;
        while passed < PASS_BYTES {
            let n = self.file.read(buf).await?;
            if n == 0 {
                return Ok(true);
            }
            self.lines.feed(&buf[..n]);
            self.read += n as u64;
            passed += n;
        }
        Ok(false)
    }

    /// Records the offset of the last whole line about once a second, and frees what is recorded.
    fn keep_up(&mut self) {
        let consumed = self.read - self.lines.pending_len() as u64;
        if consumed != self.recorded && self.recorded_at.elapsed() >= RECORD_EVERY {
            self.record(consumed);
        }
        self.free_recorded();
    }

    fn record(&mut self, offset: u64) {
        self.recorded_at = Instant::now();
        match write_offset(&self.offset_path, offset) {
            Ok(()) => {
                self.recorded = offset;
                self.record_failed = false;
            }
            // Once per failure streak (a full disk must not flood the daemon's log). Without a
            // current record nothing more is freed, and an adopting daemon reads some lines twice.
            Err(err) if !self.record_failed => {
                self.record_failed = true;
                tracing::warn!(path = %self.offset_path.display(), error = %err, "cannot record how far engine output was read");
            }
            Err(_) => {}
        }
    }

    /// Frees the blocks before the recorded offset (see the module documentation). Only recorded
    /// output: a daemon that dies now resumes from the record and must find its lines there.
    fn free_recorded(&mut self) {
        let end = self.recorded / BLOCK * BLOCK;
        if !self.can_free || end < self.freed + FREE_AFTER {
            return;
        }
        match punch_hole(&self.file, self.freed, end - self.freed) {
            Ok(()) => self.freed = end,
            Err(err) => {
                // Not worth retrying: the filesystem will not learn it while the engine runs.
                self.can_free = false;
                tracing::info!(path = %self.path.display(), error = %err, "cannot free engine output already read; the file grows until the engine ends");
            }
        }
    }
}

/// Deallocates `len` bytes from `start` without changing the file's size; they read as zeros.
fn punch_hole(file: &impl AsRawFd, start: u64, len: u64) -> io::Result<()> {
    let (Ok(start), Ok(len)) = (libc::off_t::try_from(start), libc::off_t::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate only changes the allocation of the open file behind the descriptor,
    // which `file` keeps open for the duration of the call.
    if unsafe { libc::fallocate(file.as_raw_fd(), mode, start, len) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes the record through a temporary file and a rename, so a daemon killed mid-write leaves
/// the old record or the new one. No fsync: the record has to survive the daemon, not the
/// machine (the engine does not survive a reboot either).
fn write_offset(path: &Path, offset: u64) -> io::Result<()> {
    let mut temporary = OsString::from(path.as_os_str());
    temporary.push(".tmp");
    fs::write(&temporary, format!("{offset}\n"))?;
    fs::rename(&temporary, path)
}

/// The recorded offset; 0 when there is none (nothing was freed then either, since only
/// recorded output is freed).
fn read_offset(path: &Path) -> u64 {
    fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    fn texts(logs: &LogBuffer) -> Vec<String> {
        logs.tail(usize::MAX).into_iter().map(|l| l.text).collect()
    }

    #[tokio::test]
    async fn follows_a_growing_file_and_resumes_from_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let files = create(dir.path(), "e").unwrap();
        let mut stdout = files.stdout;
        let (progress, _) = watch::channel(None);
        let logs = LogBuffer::in_memory(100);
        let followers = Followers::start(dir.path(), "e", &logs, &progress, StartAt::Beginning);
        stdout.write_all(b"one\ntwo\nhal").unwrap();
        let seen = super::super::wait_until(
            || async { texts(&logs).len() == 2 },
            Duration::from_secs(5),
            Duration::from_millis(10),
        );
        assert!(seen.await, "{:?}", texts(&logs));
        // The follower is cancelled (a daemon that died) once it has recorded its offset.
        let record = offset_path(&output_path(dir.path(), "e", "stdout"));
        let recorded = super::super::wait_until(
            || async { read_offset(&record) == 8 },
            Duration::from_secs(5),
            Duration::from_millis(20),
        );
        assert!(recorded.await, "the half line is not recorded as read");
        drop(followers);
        stdout.write_all(b"f\nthree\n").unwrap();

        let logs = LogBuffer::in_memory(100);
        let mut followers = Followers::start(dir.path(), "e", &logs, &progress, StartAt::Recorded);
        stdout.write_all(b"last").unwrap();
        assert!(followers.drain().await);
        assert_eq!(texts(&logs), ["half", "three", "last"]);
        assert_eq!(read_offset(&record), 23);
        remove(dir.path(), "e");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_new_run_starts_with_empty_files_and_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = output_path(dir.path(), "e", "stderr");
        fs::write(&path, "old output\n").unwrap();
        write_offset(&offset_path(&path), 11).unwrap();
        let files = create(dir.path(), "e").unwrap();
        assert_eq!(files.stderr.metadata().unwrap().len(), 0);
        assert_eq!(files.stderr.metadata().unwrap().mode() & 0o777, 0o600);
        assert!(!offset_path(&path).exists());
        assert!(present(dir.path(), "e") && !present(dir.path(), "other"));
    }

    #[test]
    fn punched_holes_keep_size_and_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file = File::create(&path).unwrap();
        file.write_all(&vec![b'a'; 4 * BLOCK as usize]).unwrap();
        file.sync_all().unwrap();
        match punch_hole(&file, 0, 2 * BLOCK) {
            Err(err) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => return,
            other => other.unwrap(),
        }
        let data = fs::read(&path).unwrap();
        assert_eq!(data.len(), 4 * BLOCK as usize);
        assert!(data[..2 * BLOCK as usize].iter().all(|&b| b == 0));
        assert!(data[2 * BLOCK as usize..].iter().all(|&b| b == b'a'));
    }
}
