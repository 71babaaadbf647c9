//! Reading an engine's own words: why it died (from the last log lines and the exit status) and
//! how far its model load has got.
//!
//! This is the one place in Rigdeck that matches on engine output text. Engines change their
//! messages between versions, so every rule is a plain substring over lines that real engines
//! print (llama.cpp, vLLM/SGLang, Python's own errors), tested with such lines, and a line that
//! matches nothing falls through to a cause that still shows the user the last lines.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

/// An engine that dies sooner than this after starting, before it ever became ready, "exited at
/// once": almost always a bad flag or argument rather than a problem met while loading.
pub const IMMEDIATE_EXIT: Duration = Duration::from_secs(5);

/// Why an engine stopped without being asked to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CrashCause {
    OutOfGpuMemory,
    PortInUse {
        port: Option<u16>,
    },
    UnknownArchitecture {
        architecture: Option<String>,
    },
    MissingFile {
        path: Option<String>,
    },
    ExitedImmediately {
        exit_code: Option<i32>,
    },
    NeverHealthy {
        waited_ms: u64,
    },
    Killed {
        signal: i32,
    },
    /// Anything else; `exit_code` is `None` when the exit status could not be seen (an engine
    /// adopted from an earlier run is not our child).
    Other {
        exit_code: Option<i32>,
    },
}

/// What the supervisor knows about an ended run besides its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitFacts {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// From spawn to exit.
    pub uptime: Duration,
    pub was_ready: bool,
    /// Set when the supervisor gave up waiting for readiness and stopped the engine itself.
    pub never_healthy_after: Option<Duration>,
    /// The port from the health URL, named when the engine's message does not say it.
    pub port: Option<u16>,
}

/// Classifies an ended run. `lines` are the engine's last output lines, oldest first;
/// `file_exists` is asked about paths the engine failed to load (the filesystem is passed in so
/// the function stays pure and testable).
pub fn classify(
    facts: &ExitFacts,
    lines: &[String],
    file_exists: &dyn Fn(&Path) -> bool,
) -> CrashCause {
    if let Some(waited) = facts.never_healthy_after {
        return CrashCause::NeverHealthy {
            waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
        };
    }
    // Lower-casing only ASCII keeps byte offsets equal, so text can be cut from the original line.
    let lower: Vec<String> = lines.iter().map(|l| l.to_ascii_lowercase()).collect();
    let text = Lines {
        lines,
        lower: &lower,
    };
    if let Some(cause) = text
        .port_in_use(facts.port)
        .or_else(|| text.out_of_gpu_memory())
        .or_else(|| text.unknown_architecture())
        .or_else(|| text.missing_file(file_exists))
    {
        return cause;
    }
    if let Some(signal) = facts.signal {
        return CrashCause::Killed { signal };
    }
    if !facts.was_ready && facts.uptime < IMMEDIATE_EXIT {
        return CrashCause::ExitedImmediately {
            exit_code: facts.exit_code,
        };
    }
    CrashCause::Other {
        exit_code: facts.exit_code,
    }
}

/// The last output lines with their lower-case twins, searched newest last.
struct Lines<'a> {
    lines: &'a [String],
    lower: &'a [String],
}

impl Lines<'_> {
    fn find(&self, matches: impl Fn(&str) -> bool) -> Option<(&str, &str)> {
        self.lines
            .iter()
            .zip(self.lower)
            .find(|(_, lower)| matches(lower))
            .map(|(line, lower)| (line.as_str(), lower.as_str()))
    }

    /// llama-server: "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080";
    /// Python/uvicorn (vLLM, SGLang): "[Errno 98] Address already in use".
    fn port_in_use(&self, hint: Option<u16>) -> Option<CrashCause> {
        let (_, lower) = self.find(|l| {
            l.contains("couldn't bind http server socket")
                || l.contains("address already in use")
                || l.contains("eaddrinuse")
        })?;
        Some(CrashCause::PortInUse {
            port: port_after(lower, "port:").or(hint),
        })
    }

    /// CUDA/HIP allocation failures and ggml's buffer allocation errors. A failed *CPU* buffer
    /// is host memory, not GPU memory, and is left to the other rules.
    fn out_of_gpu_memory(&self) -> Option<CrashCause> {
        self.find(|l| {
            let gpu_alloc_failed = l.contains("out of memory")
                || l.contains("outofdevicememory")
                || (l.contains("failed to allocate") && l.contains("buffer"))
                || (l.contains("alloc_buffer") && l.contains("failed"));
            gpu_alloc_failed && !l.contains("cpu")
        })
        .map(|_| CrashCause::OutOfGpuMemory)
    }

    /// llama.cpp: "unknown model architecture: 'qwen9'"; vLLM: "Model architectures ['X'] are
    /// not supported for now".
    fn unknown_architecture(&self) -> Option<CrashCause> {
        let (line, _) = self.find(|l| {
            l.contains("unknown model architecture") || l.contains("are not supported for now")
        })?;
        Some(CrashCause::UnknownArchitecture {
            architecture: quoted(line).map(str::to_string),
        })
    }

    /// "failed to open GGUF file '/m.gguf'", "No such file or directory: '/m'", or llama's
    /// "failed to load model from /m.gguf" naming a path that is indeed not there.
    fn missing_file(&self, file_exists: &dyn Fn(&Path) -> bool) -> Option<CrashCause> {
        if let Some((line, _)) = self.find(|l| {
            (l.contains("no such file or directory") || l.contains("failed to open"))
                && !l.contains("permission denied")
        }) {
            return Some(CrashCause::MissingFile {
                path: quoted(line).map(str::to_string),
            });
        }
        self.lines
            .iter()
            .zip(self.lower)
            .filter(|(_, lower)| lower.contains("failed to load model"))
            .flat_map(|(line, lower)| path_candidates(line, lower))
            .find(|path| !file_exists(Path::new(path)))
            .map(|path| CrashCause::MissingFile {
                path: Some(path.to_string()),
            })
    }
}

/// Paths named in a "failed to load model" line: quoted, or after "failed to load model from ".
fn path_candidates<'a>(line: &'a str, lower: &str) -> Vec<&'a str> {
    let mut paths = Vec::new();
    if let Some(path) = quoted(line) {
        paths.push(path);
    }
    const FROM: &str = "failed to load model from ";
    if let Some(at) = lower.find(FROM) {
        let path = line[at + FROM.len()..].trim();
        if !path.is_empty() {
            paths.push(path);
        }
    }
    paths
}

/// The first text between a pair of single or double quotes.
fn quoted(line: &str) -> Option<&str> {
    let start = line.find(['\'', '"'])?;
    let quote = line[start..].chars().next()?;
    let rest = &line[start + 1..];
    let end = rest.find(quote)?;
    Some(&rest[..end]).filter(|s| !s.is_empty())
}

/// The number right after `label` ("port: 8080" → 8080).
fn port_after(lower: &str, label: &str) -> Option<u16> {
    let rest = lower[lower.find(label)? + label.len()..].trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl CrashCause {
    /// A plain-language explanation with the fix, for the Engines page.
    pub fn explanation(&self) -> String {
        match self {
            CrashCause::OutOfGpuMemory => "The engine ran out of GPU memory. Offload fewer layers to the GPU \
                (lower -ngl or move expert tensors to the CPU), use a smaller context or a quantized KV \
                cache, or free the VRAM another process holds."
                .to_string(),
            CrashCause::PortInUse { port } => format!(
                "Port {} is already used by another program. Pick another port in the profile, or stop \
                 the program that holds it (`ss -ltnp` shows which one).",
                port.map_or_else(|| "of this engine".to_string(), |p| p.to_string())
            ),
            CrashCause::UnknownArchitecture { architecture } => format!(
                "This engine build does not know the model's architecture{}. Update or rebuild the engine \
                 to a version that supports it, or choose another model.",
                architecture.as_deref().map_or_else(String::new, |a| format!(" '{a}'"))
            ),
            CrashCause::MissingFile { path } => format!(
                "A file the engine needs was not found{}. Check the model path in the profile, or \
                 download the model again.",
                path.as_deref().map_or_else(String::new, |p| format!(": '{p}'"))
            ),
            CrashCause::ExitedImmediately { exit_code } => format!(
                "The engine exited right after starting ({}), before loading anything. This is usually \
                 an unknown flag or a bad argument: read the last lines and fix the profile's flags.",
                describe_exit_code(*exit_code)
            ),
            CrashCause::NeverHealthy { waited_ms } => format!(
                "The engine ran but its health endpoint did not answer 200 within {} s, so Rigdeck \
                 stopped it. Check that the health URL's port matches the engine's --port, or raise the \
                 ready timeout if the model is large or the disk slow.",
                waited_ms / 1000
            ),
            CrashCause::Killed { signal } => explain_signal(*signal),
            CrashCause::Other { exit_code: None } => "The engine stopped while Rigdeck could not see its exit \
                status (it was adopted from an earlier run). Its log file holds its last words."
                .to_string(),
            CrashCause::Other { exit_code } => format!(
                "The engine stopped unexpectedly ({}). Read the last log lines for its own error message.",
                describe_exit_code(*exit_code)
            ),
        }
    }

    /// Whether restarting could help. A missing file or an unsupported architecture will be just
    /// as missing or unsupported a few seconds later, so the restart policy does not retry them.
    pub fn worth_retrying(&self) -> bool {
        !matches!(
            self,
            CrashCause::MissingFile { .. } | CrashCause::UnknownArchitecture { .. }
        )
    }
}

fn describe_exit_code(code: Option<i32>) -> String {
    code.map_or_else(
        || "exit status unknown".to_string(),
        |c| format!("exit code {c}"),
    )
}

fn explain_signal(signal: i32) -> String {
    let name = signal_name(signal);
    match signal {
        libc::SIGKILL => "The engine was killed with SIGKILL, by another program or by the kernel's \
            out-of-memory killer when the host ran out of RAM (`journalctl -k | grep -i oom` tells). \
            If RAM is short, keep fewer layers on the CPU or use a smaller context."
            .to_string(),
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGABRT => format!(
            "The engine crashed ({name}, signal {signal}). This is a bug in the engine or a build that \
             does not suit this machine: read the last lines, then update or rebuild the engine."
        ),
        _ => format!(
            "The engine was terminated by {name} (signal {signal}), which Rigdeck did not send. Check \
             what else on this machine stops processes."
        ),
    }
}

fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// Model load progress (0.0–1.0) from one piece of output. `complete` says whether the text is
/// a whole line or the unfinished line the engine is still writing.
///
/// - llama.cpp prints one `.` each time the integer percentage of loaded tensor data rises and
///   ends the line at 100 %. It may skip percentages, so N dots means *at least* N %: the
///   fraction is a lower bound until the line is finished, which means all weights are loaded.
/// - vLLM and SGLang print a tqdm bar, "Loading safetensors checkpoint shards:  40% Completed |
///   2/5 [...]"; the shard count gives the fraction.
///
/// Anything else gives `None`: no fraction is invented.
pub fn load_progress(text: &str, complete: bool) -> Option<f32> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b == b'.') {
        if complete {
            return Some(1.0);
        }
        let dots = text.len().min(100) as f32;
        return Some(dots / 100.0);
    }
    const SHARDS: &str = "Loading safetensors checkpoint shards:";
    let rest = &text[text.find(SHARDS)? + SHARDS.len()..];
    let counts = rest.split('|').nth(1)?.split_whitespace().next()?;
    let (done, total) = counts.split_once('/')?;
    let (done, total): (f32, f32) = (done.parse().ok()?, total.parse().ok()?);
    (total > 0.0 && done <= total).then_some(done / total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    fn crashed(code: i32) -> ExitFacts {
        ExitFacts {
            exit_code: Some(code),
            uptime: Duration::from_secs(30),
            ..ExitFacts::default()
        }
    }

    fn cause(facts: ExitFacts, text: &str) -> CrashCause {
        classify(&facts, &lines(text), &|_| true)
    }

    #[test]
    fn cuda_out_of_memory_from_llama_cpp() {
        let log = "load_tensors: offloading 48 repeating layers to GPU\n\
            ggml_backend_cuda_buffer_type_alloc_buffer: allocating 21504.00 MiB on device 0: cudaMalloc failed: out of memory\n\
            alloc_tensor_range: failed to allocate CUDA0 buffer of size 22548578304\n\
            llama_model_load: error loading model: unable to allocate CUDA0 buffer\n\
            llama_model_load_from_file_impl: failed to load model\n\
            common_init_from_params: failed to load model '/models/qwen-32b.gguf'\n\
            srv    load_model: failed to load model, '/models/qwen-32b.gguf'\n\
            main: exiting due to model loading error";
        // The model path does not exist in the test's filesystem probe, yet OOM wins.
        assert_eq!(
            classify(&crashed(1), &lines(log), &|_| false),
            CrashCause::OutOfGpuMemory
        );
    }

    #[test]
    fn other_out_of_memory_wordings() {
        for line in [
            "CUDA error: out of memory",
            "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1207959552",
            "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "ggml_vulkan: Device memory allocation of size 4294967296 failed. vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        ] {
            assert_eq!(cause(crashed(1), line), CrashCause::OutOfGpuMemory, "{line}");
        }
        // Host memory is not GPU memory.
        let host = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 68719476736";
        assert_eq!(
            cause(crashed(1), host),
            CrashCause::Other { exit_code: Some(1) }
        );
    }

    #[test]
    fn port_in_use_names_the_port() {
        let llama = "main: binding port with default address family\n\
            start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080\n\
            main: exiting due to HTTP server error";
        let mut facts = crashed(1);
        facts.uptime = Duration::from_millis(80);
        assert_eq!(
            cause(facts, llama),
            CrashCause::PortInUse { port: Some(8080) }
        );
        let python = "OSError: [Errno 98] Address already in use";
        facts.port = Some(9100);
        assert_eq!(
            cause(facts, python),
            CrashCause::PortInUse { port: Some(9100) }
        );
        let uvicorn = "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use";
        assert_eq!(
            cause(facts, uvicorn),
            CrashCause::PortInUse { port: Some(9100) }
        );
    }

    #[test]
    fn unknown_architecture_names_it() {
        let llama = "llama_model_loader: - kv   0:                       general.architecture str              = qwen9\n\
            llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'qwen9'\n\
            llama_model_load_from_file_impl: failed to load model";
        assert_eq!(
            cause(crashed(1), llama),
            CrashCause::UnknownArchitecture {
                architecture: Some("qwen9".into())
            }
        );
        let vllm =
            "ValueError: Model architectures ['FancyForCausalLM'] are not supported for now.";
        assert_eq!(
            cause(crashed(1), vllm),
            CrashCause::UnknownArchitecture {
                architecture: Some("FancyForCausalLM".into())
            }
        );
    }

    #[test]
    fn missing_model_file() {
        let llama = "gguf_init_from_file: failed to open GGUF file '/models/gone.gguf'\n\
            llama_model_load: error loading model: llama_model_loader: failed to load model from /models/gone.gguf\n\
            llama_model_load_from_file_impl: failed to load model";
        assert_eq!(
            cause(crashed(1), llama),
            CrashCause::MissingFile {
                path: Some("/models/gone.gguf".into())
            }
        );
        let python =
            "FileNotFoundError: [Errno 2] No such file or directory: '/models/config.json'";
        assert_eq!(
            cause(crashed(1), python),
            CrashCause::MissingFile {
                path: Some("/models/config.json".into())
            }
        );
    }

    #[test]
    fn failed_to_load_model_counts_as_missing_only_when_the_path_is_gone() {
        let log = "llama_model_load: error loading model: llama_model_loader: failed to load model from /m/x.gguf";
        let gone = classify(&crashed(1), &lines(log), &|p| p != Path::new("/m/x.gguf"));
        assert_eq!(
            gone,
            CrashCause::MissingFile {
                path: Some("/m/x.gguf".into())
            }
        );
        let present = classify(&crashed(1), &lines(log), &|_| true);
        assert_eq!(present, CrashCause::Other { exit_code: Some(1) });
    }

    #[test]
    fn signals_timeouts_and_quick_exits() {
        let killed = ExitFacts {
            signal: Some(libc::SIGKILL),
            uptime: Duration::from_millis(10),
            ..ExitFacts::default()
        };
        assert_eq!(
            cause(killed, "srv  update_slots: all slots are idle"),
            CrashCause::Killed { signal: 9 }
        );
        let quick = ExitFacts {
            exit_code: Some(1),
            uptime: Duration::from_millis(40),
            ..ExitFacts::default()
        };
        let bad_flag = "error: invalid argument: --no-such-flag";
        assert_eq!(
            cause(quick, bad_flag),
            CrashCause::ExitedImmediately { exit_code: Some(1) }
        );
        let mut after_ready = quick;
        after_ready.was_ready = true;
        assert_eq!(
            cause(after_ready, bad_flag),
            CrashCause::Other { exit_code: Some(1) }
        );
        let timed_out = ExitFacts {
            signal: Some(libc::SIGTERM),
            never_healthy_after: Some(Duration::from_secs(3)),
            ..ExitFacts::default()
        };
        // The supervisor's own timeout wins over whatever the stop made the engine print.
        assert_eq!(
            cause(timed_out, "Address already in use"),
            CrashCause::NeverHealthy { waited_ms: 3000 }
        );
    }

    #[test]
    fn every_cause_explains_itself_with_a_fix() {
        let causes = [
            CrashCause::OutOfGpuMemory,
            CrashCause::PortInUse { port: Some(8080) },
            CrashCause::UnknownArchitecture {
                architecture: Some("qwen9".into()),
            },
            CrashCause::MissingFile {
                path: Some("/m/x.gguf".into()),
            },
            CrashCause::ExitedImmediately { exit_code: Some(1) },
            CrashCause::NeverHealthy { waited_ms: 3000 },
            CrashCause::Killed { signal: 9 },
            CrashCause::Killed { signal: 11 },
            CrashCause::Killed { signal: 1 },
            CrashCause::Other { exit_code: Some(3) },
            CrashCause::Other { exit_code: None },
        ];
        for cause in causes {
            let text = cause.explanation();
            assert!(text.len() > 60 && text.ends_with('.'), "{cause:?}: {text}");
        }
        assert!(CrashCause::PortInUse { port: Some(8080) }
            .explanation()
            .contains("8080"));
        assert!(CrashCause::Killed { signal: 11 }
            .explanation()
            .contains("SIGSEGV"));
        assert!(!CrashCause::MissingFile { path: None }.worth_retrying());
        assert!(CrashCause::OutOfGpuMemory.worth_retrying());
    }

    #[test]
    fn llama_cpp_dots_give_a_lower_bound_until_the_line_ends() {
        assert_eq!(
            load_progress(".........................", false),
            Some(0.25)
        );
        assert_eq!(load_progress(&".".repeat(87), true), Some(1.0));
        assert_eq!(load_progress(&".".repeat(130), false), Some(1.0));
        assert_eq!(
            load_progress(
                "load_tensors: loading model tensors, this can take a while... (mmap = true)",
                true
            ),
            None
        );
        assert_eq!(load_progress("", false), None);
    }

    #[test]
    fn vllm_shard_bar_gives_the_shard_fraction() {
        let bar =
            "Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:00<00:00,  4.21it/s]";
        assert_eq!(load_progress(bar, false), Some(0.4));
        let start = "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]";
        assert_eq!(load_progress(start, true), Some(0.0));
        assert_eq!(
            load_progress("Loading safetensors checkpoint shards: | x/y", true),
            None
        );
        assert_eq!(
            load_progress("INFO: Started server process [123]", true),
            None
        );
    }
}
