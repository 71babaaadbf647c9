//! Running a helper program (CMake, Ninja, pip, an engine's `--help`) with its stdout and stderr
//! read as they come, line by line through the supervisor's one line splitter, and its last
//! lines kept for the error message when it fails.

use std::collections::VecDeque;
use std::io;
use std::process::Stdio;

use rigdeck_supervisor::LineSplitter;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::mpsc;

/// How many lines of output a failure shows (the full log stays in the build folder).
pub const TAIL_LINES: usize = 40;

/// The output of a program run with [`run_streaming`].
#[derive(Debug, Clone, Default)]
pub struct StreamedRun {
    pub code: Option<i32>,
    success: bool,
    /// The last [`TAIL_LINES`] lines, stdout and stderr interleaved as they came.
    pub tail: VecDeque<String>,
}

impl StreamedRun {
    pub fn success(&self) -> bool {
        self.success
    }

    pub fn tail_text(&self) -> String {
        self.tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// "exit code 3" or "killed by a signal".
    pub fn status_text(&self) -> String {
        match self.code {
            Some(code) => format!("exit code {code}"),
            None => "killed by a signal".to_owned(),
        }
    }
}

/// Runs `command` with stdout and stderr read line by line (both, as they come), calling
/// `on_line` for each and keeping the last lines. The child dies with the future.
pub(crate) async fn run_streaming(
    mut command: Command,
    mut on_line: impl FnMut(&str),
) -> io::Result<StreamedRun> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let (sender, mut lines) = mpsc::unbounded_channel::<String>();
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(forward_lines(stdout, sender.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(forward_lines(stderr, sender.clone()));
    }
    drop(sender);
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    while let Some(line) = lines.recv().await {
        on_line(&line);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    let status = child.wait().await?;
    Ok(StreamedRun {
        code: status.code(),
        success: status.success(),
        tail,
    })
}

/// Sends each line of `reader` until it closes, cut by the one line splitter (lossy UTF-8:
/// compilers print what they like; no line longer than the splitter's cap).
async fn forward_lines(mut reader: impl AsyncRead + Unpin, sender: mpsc::UnboundedSender<String>) {
    let mut lines = LineSplitter::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let read = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for line in lines.feed(buf.get(..read).unwrap_or_default()) {
            if sender.send(line).is_err() {
                return;
            }
        }
    }
    if let Some(last) = lines.finish() {
        let _ = sender.send(last);
    }
}

/// The last non-empty line of a program's output: what a one-line error shows of it.
pub(crate) fn last_line(output: &str) -> Option<&str> {
    output.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn streaming_keeps_both_streams_and_the_last_lines() {
        // Fixed test scripts (no user input): many lines on stdout; then a few on both streams.
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "i=1; while [ $i -le 50 ]; do echo line $i; i=$((i+1)); done",
        ]);
        let mut seen = 0;
        let run = run_streaming(command, |_| seen += 1).await.unwrap();
        assert_eq!(seen, 50);
        assert!(run.success());
        assert_eq!(run.tail.len(), TAIL_LINES);
        assert_eq!(run.tail.front().map(String::as_str), Some("line 11"));
        assert_eq!(run.tail.back().map(String::as_str), Some("line 50"));

        let mut command = Command::new("sh");
        command.args(["-c", "echo out; echo oops >&2; exit 3"]);
        let run = run_streaming(command, |_| {}).await.unwrap();
        assert_eq!(run.code, Some(3));
        assert!(!run.success());
        assert!(run.tail_text().contains("oops") && run.tail_text().contains("out"));
    }

    #[tokio::test]
    async fn output_that_is_not_utf8_or_never_ends_a_line_is_still_read() {
        // Invalid UTF-8 then 20 000 bytes without a newline: both arrive, the long one in pieces.
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "printf 'bad \\377 byte\\nafter\\n'; head -c 20000 /dev/zero | tr '\\0' x",
        ]);
        let mut lines = Vec::new();
        let run = run_streaming(command, |line| lines.push(line.to_owned()))
            .await
            .unwrap();
        assert!(run.success());
        assert_eq!(lines.first().map(String::as_str), Some("bad \u{fffd} byte"));
        assert_eq!(lines.get(1).map(String::as_str), Some("after"));
        let long: usize = lines.iter().skip(2).map(String::len).sum();
        assert_eq!(long, 20_000);
        assert!(lines
            .iter()
            .all(|l| l.len() <= rigdeck_supervisor::logs::MAX_LINE_BYTES));
    }
}
