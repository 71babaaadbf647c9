//! llama.cpp's own memory figures for a plan: `llama-fit-params -fitp on` loads a model's
//! metadata with the same flags a llama-server would get and prints, per device, the model,
//! context and compute memory it would allocate (no weights are read). Rigdeck shows them next
//! to its own estimate as "llama.cpp dry run".

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use thiserror::Error;

const MIB: u64 = 1 << 20;

/// One device line of the table, in bytes (llama.cpp prints whole MiB, rounded down).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceMemory {
    /// As llama.cpp names it: `CUDA0`, `Vulkan1`, `Host` …
    pub device: String,
    pub model_bytes: u64,
    pub context_bytes: u64,
    pub compute_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DryRun {
    pub devices: Vec<DeviceMemory>,
    /// The arguments `llama-fit-params` ran with.
    pub args: Vec<String>,
    /// What differs from the llama-server command (flags it does not take).
    pub notes: Vec<String>,
}

#[derive(Debug, Error)]
pub enum DryRunError {
    #[error("cannot run {}: {source}", path.display())]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("llama.cpp's dry run failed: {message}")]
    Failed { message: String },
    #[error("llama.cpp's dry run did not finish within {seconds} s; it was stopped")]
    TimedOut { seconds: u64 },
}

/// `llama-fit-params` beside a build's `llama-server`, if the build has one.
pub fn fit_params_beside(llama_server: &Path) -> Option<PathBuf> {
    let path = llama_server.parent()?.join("llama-fit-params");
    path.is_file().then_some(path)
}

/// The dry run's arguments from a llama-server command's: flags it does not take are dropped
/// (and said so), and the print is switched on. `-nr` keeps the weights out of the CPU repack
/// buffer (AMX, ARM), which its table leaves out; the bytes are the same.
pub fn dry_run_args(server_args: &[String]) -> (Vec<String>, Vec<String>) {
    let mut args = Vec::new();
    let mut notes = Vec::new();
    for arg in server_args {
        match arg.as_str() {
            "-kvu" | "--kv-unified" | "-no-kvu" | "--no-kv-unified" => notes.push(
                "llama-fit-params has no -kvu: it sizes one KV stream per slot (the same total for full attention)".to_owned(),
            ),
            _ => args.push(arg.clone()),
        }
    }
    args.extend(["-fitp", "on", "-nr"].map(String::from));
    (args, notes)
}

/// The table `-fitp on` prints: `<device> <model MiB> <context MiB> <compute MiB>` per line.
pub fn parse_table(stdout: &str) -> Vec<DeviceMemory> {
    stdout
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [device, model, context, compute] = words.as_slice() else {
                return None;
            };
            let mib = |w: &str| w.parse::<u64>().ok().map(|n| n.saturating_mul(MIB));
            Some(DeviceMemory {
                device: (*device).to_owned(),
                model_bytes: mib(model)?,
                context_bytes: mib(context)?,
                compute_bytes: mib(compute)?,
            })
        })
        .collect()
}

/// Runs the dry run (argv, no shell) and reads its table; a failure carries llama.cpp's own
/// last words.
pub async fn run(
    bin: &Path,
    server_args: &[String],
    timeout: Duration,
) -> Result<DryRun, DryRunError> {
    let (args, notes) = dry_run_args(server_args);
    let child = tokio::process::Command::new(bin)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| DryRunError::Spawn {
            path: bin.to_owned(),
            source,
        })?;
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| DryRunError::TimedOut {
            seconds: timeout.as_secs(),
        })?
        .map_err(|source| DryRunError::Spawn {
            path: bin.to_owned(),
            source,
        })?;
    let devices = parse_table(&String::from_utf8_lossy(&output.stdout));
    if !output.status.success() || devices.is_empty() {
        return Err(DryRunError::Failed {
            message: last_words(&String::from_utf8_lossy(&output.stderr)),
        });
    }
    Ok(DryRun {
        devices,
        args,
        notes,
    })
}

/// The lines that say what went wrong (errors and exceptions), else the last line.
fn last_words(stderr: &str) -> String {
    let telling: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.contains(" E ")
                || l.starts_with("error")
                || l.contains("what():")
                || l.contains("failed")
        })
        .collect();
    let chosen = if telling.is_empty() {
        stderr
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(|l| vec![l])
            .unwrap_or_default()
    } else {
        telling
    };
    let text = chosen.join("; ");
    if text.is_empty() {
        "it printed no memory table and no error".to_owned()
    } else {
        text.chars().take(600).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_read_in_bytes_and_other_lines_ignored() {
        let out = "CUDA0 1200 300 250 \nCUDA1 900 200 100\nHost 599 64 254 \nnot a row\n";
        let rows = parse_table(out);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].device, "CUDA0");
        assert_eq!(rows[2].model_bytes, 599 * MIB);
        assert_eq!(rows[2].compute_bytes, 254 * MIB);
        assert!(parse_table("Host 1 2 x\n").is_empty());
    }

    #[test]
    fn flags_the_dry_run_does_not_take_are_dropped_and_said() {
        let server: Vec<String> = ["-m", "x.gguf", "-c", "8192", "-kvu", "-ot", "exps=CPU"]
            .map(String::from)
            .to_vec();
        let (args, notes) = dry_run_args(&server);
        assert_eq!(
            args,
            ["-m", "x.gguf", "-c", "8192", "-ot", "exps=CPU", "-fitp", "on", "-nr"]
        );
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn a_failure_is_told_with_llama_cpps_own_words() {
        let stderr = "0.00.002 I loading\n0.00.002 E gguf_init_from_file: failed to open GGUF file 'x'\nterminate called\n  what():  failed to load model\n";
        let words = last_words(stderr);
        assert!(
            words.contains("failed to open GGUF file") && words.contains("failed to load model"),
            "{words}"
        );
        assert_eq!(last_words(""), "it printed no memory table and no error");
    }
}
