//! Runs `llama-perplexity` from an argv vector, reading its output as it comes (both streams, any
//! split) to report chunks done and time left, and stops it when cancelled: the process is killed
//! with the future that owns it.

use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::{mpsc, watch};

use super::printout::ChunkProgress;

/// What a finished run printed.
#[derive(Debug, Clone)]
pub struct Finished {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
    pub wall_s: f64,
}

/// Progress as it is reported: the chunks and the time left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunProgress {
    pub fraction: Option<f64>,
    pub eta_s: Option<f64>,
}

/// Runs `argv` to its end; `Err` when it cannot start or is cancelled.
pub async fn run(
    argv: &[String],
    env: &[(String, String)],
    mut cancel: watch::Receiver<bool>,
    mut on_progress: impl FnMut(RunProgress),
) -> Result<Finished, String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("no llama-perplexity command to run".into());
    };
    if *cancel.borrow() {
        return Err("cancelled".into());
    }
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("cannot run {program}: {err}"))?;
    let (tx, mut pieces) = mpsc::channel::<(bool, String)>(64);
    let out = child
        .stdout
        .take()
        .map(|s| tokio::spawn(forward(s, true, tx.clone())));
    let err = child
        .stderr
        .take()
        .map(|s| tokio::spawn(forward(s, false, tx)));
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let mut progress = ChunkProgress::default();
    loop {
        tokio::select! {
            piece = pieces.recv() => match piece {
                Some((is_stdout, text)) => {
                    progress.read(&text);
                    if is_stdout { stdout.push_str(&text) } else { stderr.push_str(&text) }
                    on_progress(RunProgress {
                        fraction: progress.fraction(),
                        eta_s: progress.eta_s(started.elapsed().as_secs_f64()),
                    });
                }
                None => break,
            },
            Ok(_) = cancel.wait_for(|c| *c) => return Err("cancelled".into()),
        }
    }
    for task in [out, err].into_iter().flatten() {
        let _ = task.await;
    }
    let status = tokio::select! {
        status = child.wait() => status.map_err(|e| format!("{program}: {e}"))?,
        Ok(_) = cancel.wait_for(|c| *c) => return Err("cancelled".into()),
    };
    Ok(Finished {
        success: status.success(),
        status: status.to_string(),
        stdout,
        stderr,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Sends a stream's output on in pieces (UTF-8 split points kept whole).
async fn forward(
    mut stream: impl AsyncRead + Unpin,
    is_stdout: bool,
    tx: mpsc::Sender<(bool, String)>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    while let Ok(n) = stream.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buffer[..n]);
        let whole = match std::str::from_utf8(&pending) {
            Ok(_) => pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => pending.len(),
        };
        let text = String::from_utf8_lossy(&pending[..whole]).into_owned();
        pending.drain(..whole);
        if tx.send((is_stdout, text)).await.is_err() {
            break;
        }
    }
    if !pending.is_empty() {
        let _ = tx
            .send((is_stdout, String::from_utf8_lossy(&pending).into_owned()))
            .await;
    }
}

/// The last `n` lines of a text, for an error message.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
