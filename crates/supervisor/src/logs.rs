//! An engine's output: cut into lines (one `LineReader` for everything an engine prints, fed
//! from the output files the engine writes; see `output`) and kept in a bounded ring buffer
//! (searchable, streamed to subscribers) and a size-rotated log file.
//!
//! One `LogBuffer` lives as long as a process, across restarts, so the lines that led up to a
//! crash stay visible after the restart. Each line gets a sequence number so the supervisor can
//! take "the lines of this run" when it classifies a crash.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use tokio::sync::{broadcast, watch};

use super::classify;

/// Longest line kept; longer output is cut into pieces of this size, which bounds the ring's
/// memory (an engine echoing a whole prompt on one line must not cost hundreds of MB).
pub const MAX_LINE_BYTES: usize = 8 * 1024;

/// How many lines a slow subscriber may fall behind before it skips ahead.
const SUBSCRIBER_BACKLOG: usize = 1024;

/// Which stream of the engine a line came from; `Supervisor` lines are Rigdeck's own notes
/// (started, stopping …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    Stdout,
    Stderr,
    Supervisor,
}

/// One line of output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// Increases by one per line for the life of the buffer.
    pub seq: u64,
    /// Milliseconds since the Unix epoch when the line was read.
    pub at_ms: i64,
    pub stream: LogStream,
    pub text: String,
}

/// Size limits of the ring buffer and the log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    pub ring_lines: usize,
    /// The file is rotated before it would grow past this.
    pub file_max_bytes: u64,
    /// How many rotated files (`<name>.log.1` … `.N`) are kept.
    pub file_keep: u32,
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            ring_lines: 5_000,
            file_max_bytes: 10 * 1024 * 1024,
            file_keep: 3,
        }
    }
}

/// The recent output of one process. Cheap to clone; clones share the same buffer.
#[derive(Clone)]
pub struct LogBuffer {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    sender: broadcast::Sender<LogLine>,
    file_path: Option<PathBuf>,
}

struct State {
    ring: VecDeque<LogLine>,
    capacity: usize,
    next_seq: u64,
    file: Option<RotatingFile>,
    file_error_reported: bool,
}

impl LogBuffer {
    /// A buffer that keeps lines in memory only.
    pub fn in_memory(ring_lines: usize) -> Self {
        Self::build(ring_lines, None)
    }

    /// A buffer that also appends every line to `path`, rotating it by size.
    pub fn with_file(path: &Path, limits: LogLimits) -> io::Result<Self> {
        let file = RotatingFile::open(path, limits.file_max_bytes, limits.file_keep)?;
        Ok(Self::build(limits.ring_lines, Some(file)))
    }

    fn build(ring_lines: usize, file: Option<RotatingFile>) -> Self {
        let (sender, _) = broadcast::channel(SUBSCRIBER_BACKLOG);
        let capacity = ring_lines.max(1);
        Self {
            inner: Arc::new(Inner {
                file_path: file.as_ref().map(|f| f.path.clone()),
                state: Mutex::new(State {
                    ring: VecDeque::with_capacity(capacity.min(1024)),
                    capacity,
                    next_seq: 0,
                    file,
                    file_error_reported: false,
                }),
                sender,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves consistent data behind; keep going.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a line: ring buffer, log file, subscribers, in that order, under one lock so the
    /// three see the same order.
    pub fn push(&self, stream: LogStream, text: impl Into<String>) -> LogLine {
        let mut state = self.lock();
        let line = LogLine {
            seq: state.next_seq,
            at_ms: crate::now_ms(),
            stream,
            text: text.into(),
        };
        state.next_seq += 1;
        if state.ring.len() >= state.capacity {
            state.ring.pop_front();
        }
        state.ring.push_back(line.clone());
        state.write_to_file(&line);
        // Nobody listening is fine.
        let _ = self.inner.sender.send(line.clone());
        line
    }

    /// The newest `n` lines, oldest first.
    pub fn tail(&self, n: usize) -> Vec<LogLine> {
        let state = self.lock();
        let skip = state.ring.len().saturating_sub(n);
        state.ring.iter().skip(skip).cloned().collect()
    }

    /// Lines with a sequence number of at least `seq` that are still in the ring.
    pub fn since(&self, seq: u64) -> Vec<LogLine> {
        let state = self.lock();
        state
            .ring
            .iter()
            .filter(|l| l.seq >= seq)
            .cloned()
            .collect()
    }

    /// Lines whose text contains `needle`, ignoring ASCII case, oldest first.
    pub fn search(&self, needle: &str) -> Vec<LogLine> {
        let needle = needle.to_ascii_lowercase();
        let state = self.lock();
        state
            .ring
            .iter()
            .filter(|l| l.text.to_ascii_lowercase().contains(&needle))
            .cloned()
            .collect()
    }

    /// Every line pushed from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<LogLine> {
        self.inner.sender.subscribe()
    }

    /// The sequence number the next line will get.
    pub fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    /// The current log file (rotated files sit beside it as `.1`, `.2`, …).
    pub fn file_path(&self) -> Option<&Path> {
        self.inner.file_path.as_deref()
    }
}

impl State {
    fn write_to_file(&mut self, line: &LogLine) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let stream = match line.stream {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
            LogStream::Supervisor => "rigdeck",
        };
        let record = format!("{} {stream} {}\n", format_utc_ms(line.at_ms), line.text);
        match file.write_record(record.as_bytes()) {
            Ok(()) => self.file_error_reported = false,
            // Report once per failure streak: a full disk must not flood the daemon's own log,
            // and the ring buffer keeps working without the file.
            Err(err) if !self.file_error_reported => {
                self.file_error_reported = true;
                tracing::warn!(path = %file.path.display(), error = %err, "cannot write engine log file");
            }
            Err(_) => {}
        }
    }
}

/// An append-only file that is renamed to `.1` (older ones shifted to `.2`, …) before it would
/// grow past its limit.
struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    file: File,
    written: u64,
}

impl RotatingFile {
    fn open(path: &Path, max_bytes: u64, keep: u32) -> io::Result<Self> {
        let file = open_append(path)?;
        let written = file.metadata()?.len();
        Ok(Self {
            path: path.to_path_buf(),
            max_bytes: max_bytes.max(1),
            keep,
            file,
            written,
        })
    }

    /// One `write` per record, unbuffered, so a reader (or a crash) sees whole lines at once.
    fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        let len = record.len() as u64;
        if self.written > 0 && self.written + len > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(record)?;
        self.written += len;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        if self.keep == 0 {
            self.file.set_len(0)?;
            self.written = 0;
            return Ok(());
        }
        for n in (1..self.keep).rev() {
            rename_if_present(&self.numbered(n), &self.numbered(n + 1))?;
        }
        rename_if_present(&self.path, &self.numbered(1))?;
        self.file = open_append(&self.path)?;
        self.written = 0;
        Ok(())
    }

    fn numbered(&self, n: u32) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }
}

/// Engine logs can hold prompts, so only the user may read them.
fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

fn rename_if_present(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Cuts a child's output into lines: the one line splitter for everything Rigdeck runs (engines,
/// builds, pip). Lossy UTF-8 (a compiler or an engine prints what it likes), the line ending and
/// carriage-return redraws resolved as a terminal shows them, and no line longer than
/// [`MAX_LINE_BYTES`]: a child that never prints a newline cannot grow our memory.
#[derive(Debug, Default)]
pub struct LineSplitter {
    /// Bytes of a line whose end has not arrived yet.
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Takes the next bytes of output and returns every line they complete. A line longer than
    /// [`MAX_LINE_BYTES`] comes out in pieces of that size.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = self.pending.drain(..=end).collect();
            lines.push(visible_text(&raw));
        }
        while self.pending.len() >= MAX_LINE_BYTES {
            let raw: Vec<u8> = self.pending.drain(..MAX_LINE_BYTES).collect();
            lines.push(visible_text(&raw));
        }
        lines
    }

    /// The unfinished last line as a terminal shows it so far (where progress bars are drawn).
    pub fn pending_text(&self) -> Option<String> {
        (!self.pending.is_empty()).then(|| visible_text(&self.pending))
    }

    /// How many of the bytes fed so far belong to a line not returned yet.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The output has ended: its unfinished last line, if any.
    pub fn finish(&mut self) -> Option<String> {
        let raw = std::mem::take(&mut self.pending);
        (!raw.is_empty()).then(|| visible_text(&raw))
    }
}

/// An engine's output into its log: each whole line goes into `logs`; load progress (from whole
/// lines and from the unfinished last one, where llama.cpp's dots and tqdm bars are drawn) goes
/// into `progress`, the highest value seen, since engines never unload while loading.
pub(crate) struct LineReader {
    stream: LogStream,
    logs: LogBuffer,
    progress: watch::Sender<Option<f32>>,
    lines: LineSplitter,
}

impl LineReader {
    pub fn new(stream: LogStream, logs: LogBuffer, progress: watch::Sender<Option<f32>>) -> Self {
        Self {
            stream,
            logs,
            progress,
            lines: LineSplitter::default(),
        }
    }

    /// Takes the next bytes of output and logs every line they complete.
    pub fn feed(&mut self, bytes: &[u8]) {
        for line in self.lines.feed(bytes) {
            self.emit(line);
        }
        if let Some(partial) = self.lines.pending_text() {
            report_progress(&self.progress, classify::load_progress(&partial, false));
        }
    }

    /// How many of the bytes fed so far belong to a line not logged yet.
    pub fn pending_len(&self) -> usize {
        self.lines.pending_len()
    }

    /// The output has ended: logs its unfinished last line, if any.
    pub fn finish(&mut self) {
        if let Some(line) = self.lines.finish() {
            self.emit(line);
        }
    }

    fn emit(&self, text: String) {
        report_progress(&self.progress, classify::load_progress(&text, true));
        self.logs.push(self.stream, text);
    }
}

fn report_progress(progress: &watch::Sender<Option<f32>>, value: Option<f32>) {
    if let Some(value) = value {
        progress.send_if_modified(|current| {
            let higher = current.is_none_or(|c| value > c);
            if higher {
                *current = Some(value);
            }
            higher
        });
    }
}

/// What a terminal would show for this output: line ending removed, and for text redrawn with
/// carriage returns (progress bars) only the last drawing.
fn visible_text(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches(['\n', '\r']);
    text.rsplit('\r').next().unwrap_or(text).to_string()
}

/// `2026-05-01T12:00:00.123Z` from milliseconds since the epoch (UTC, proleptic Gregorian).
pub fn format_utc_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day); Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_lines_and_searches_them() {
        let logs = LogBuffer::in_memory(3);
        for text in ["alpha", "Beta", "gamma", "delta"] {
            logs.push(LogStream::Stdout, text);
        }
        let texts: Vec<String> = logs.tail(10).into_iter().map(|l| l.text).collect();
        assert_eq!(texts, ["Beta", "gamma", "delta"]);
        assert_eq!(logs.search("BETA").len(), 1);
        assert_eq!(logs.since(2).len(), 2);
        assert_eq!(logs.next_seq(), 4);
    }

    #[test]
    fn file_rotates_by_size_and_keeps_a_few() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.log");
        let limits = LogLimits {
            ring_lines: 10,
            file_max_bytes: 200,
            file_keep: 2,
        };
        let logs = LogBuffer::with_file(&path, limits).unwrap();
        for i in 0..40 {
            logs.push(LogStream::Stderr, format!("line {i:02} with some padding"));
        }
        let current = std::fs::read_to_string(&path).unwrap();
        assert!(
            current.len() <= 200 && current.ends_with("line 39 with some padding\n"),
            "{current}"
        );
        assert!(current.contains(" stderr line 39"));
        assert!(dir.path().join("e.log.1").exists() && dir.path().join("e.log.2").exists());
        assert!(!dir.path().join("e.log.3").exists());
    }

    #[test]
    fn terminal_view_of_carriage_returns() {
        assert_eq!(visible_text(b"10%\r20%\r30%\r\n"), "30%");
        assert_eq!(visible_text(b"plain\n"), "plain");
        assert_eq!(visible_text(b"\xff bad utf8\n"), "\u{fffd} bad utf8");
    }

    #[test]
    fn utc_timestamps() {
        assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            format_utc_ms(1_777_593_600_000 + 3_723_004),
            "2026-05-01T01:02:03.004Z"
        );
        assert_eq!(format_utc_ms(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn line_reader_splits_lines_cuts_long_ones_and_reports_partial_dots() {
        let logs = LogBuffer::in_memory(100);
        let (progress_tx, progress_rx) = watch::channel(None);
        let mut reader = LineReader::new(LogStream::Stderr, logs.clone(), progress_tx);
        reader.feed(b"load_tensors: loading\r\n..........");
        assert_eq!(*progress_rx.borrow(), Some(0.1));
        assert_eq!(reader.pending_len(), 10);
        reader.feed(b"....\nlast with newline\n");
        assert_eq!(reader.pending_len(), 0);
        reader.feed(&[b'y'; MAX_LINE_BYTES + 5]);
        assert_eq!(reader.pending_len(), 5, "a long line is cut at the limit");
        reader.finish();
        let texts: Vec<String> = logs.tail(10).into_iter().map(|l| l.text).collect();
        let long = "y".repeat(MAX_LINE_BYTES);
        assert_eq!(
            texts,
            [
                "load_tensors: loading",
                "..............",
                "last with newline",
                long.as_str(),
                "yyyyy"
            ]
        );
        assert!(logs.tail(10).iter().all(|l| l.stream == LogStream::Stderr));
        assert_eq!(*progress_rx.borrow(), Some(1.0));
    }
}
