//! What an engine binary can do, read from what it says about itself: `--version` (version,
//! commit, compiler) and `--help` (every option it accepts). The parsers are pure functions over
//! text; [`probe_binary`] runs the binary (argv only, 10 s limit each) and feeds them.
//!
//! The option list is kept whole so launch profiles can reject a flag the build does not know;
//! [`Features`] names the ones Rigdeck's planner and launcher branch on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use super::{is_executable_file, Backend};

/// How long `--version`/`--help` may take; a binary that hangs is not an engine we can drive.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Version and build information from `--version`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VersionInfo {
    /// `0.5.0-dev` (current llama.cpp) or the build number (older trees, ik_llama.cpp).
    pub version: Option<String>,
    pub build_number: Option<u64>,
    pub commit: Option<String>,
    /// `GNU 12.2.0`.
    pub compiler: Option<String>,
    /// `Linux x86_64`.
    pub target: Option<String>,
}

/// The options Rigdeck branches on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Features {
    /// `-ot/--override-tensor`: per-tensor placement (experts on CPU, layers per GPU).
    pub override_tensor: bool,
    /// `--fit`: llama.cpp fits context and layers to free memory by itself.
    pub fit: bool,
    /// `--n-cpu-moe/-ncmoe N`: experts of the first N layers on CPU.
    pub n_cpu_moe: bool,
    /// `--cpu-moe/-cmoe`: all experts on CPU.
    pub cpu_moe: bool,
    /// A draft model or another speculative decoding method (`-md`, `--draft`, `--spec-*`).
    pub speculative: bool,
    /// The methods `--spec-type` accepts (`draft-simple`, `draft-mtp`, `ngram-mod`, …).
    pub speculative_types: Vec<String>,
    /// Multi-token prediction drafting (a `draft-mtp` spec type, or an `--mtp`-style option).
    pub mtp: bool,
    /// `--metrics`: the Prometheus endpoint.
    pub metrics: bool,
    /// `--jinja`: the model's own chat template.
    pub jinja: bool,
    /// `--reasoning/-rea`: reasoning on/off server-wide.
    pub reasoning: bool,
    /// `--reasoning-budget N`.
    pub reasoning_budget: bool,
    /// `-fa/--flash-attn`.
    pub flash_attn: bool,
    /// ik_llama.cpp's fused MoE (`-fmoe`, on by default in current trees: `-no-fmoe`): the
    /// expert matmuls of a layer fused into one op.
    pub fused_moe: bool,
    /// ik_llama.cpp `-rtr/--run-time-repack`: weights repacked at load for faster CPU matmuls
    /// (read into RAM, not mapped).
    pub run_time_repack: bool,
    /// ik_llama.cpp `-mla N`: how DeepSeek-style latent attention is computed and cached.
    pub mla: bool,
    /// ik_llama.cpp `-amb N`: caps the attention compute buffer at N MiB.
    pub attn_max_batch: bool,
}

/// Everything known about one engine build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    #[serde(flatten)]
    pub version: VersionInfo,
    pub features: Features,
    /// Every option name the help lists (`-ngl`, `--n-gpu-layers`, …).
    pub options: BTreeSet<String>,
}

impl Capabilities {
    /// Reads both outputs. `version_text` and `help_text` are stdout and stderr together.
    pub fn from_outputs(version_text: &str, help_text: &str) -> Self {
        let options = parse_help_options(help_text);
        let features = detect_features(&options, help_text);
        Self {
            version: parse_version(version_text),
            features,
            options,
        }
    }

    /// The first of `names` (spellings of one option) the help lists; with no help read, the
    /// first of them.
    pub fn spelling(&self, names: &[&'static str]) -> Option<&'static str> {
        if self.options.is_empty() {
            return names.first().copied();
        }
        names.iter().copied().find(|n| self.options.contains(*n))
    }

    /// Whether the build accepts `option` (`--fit`, `-ot`, …).
    pub fn accepts(&self, option: &str) -> bool {
        self.options.contains(option)
    }

    /// A short version for lists: `0.5.0-dev (0c1e570)`, `b3859 (9a0e35dc)`, or `unknown`.
    pub fn version_label(&self) -> String {
        let v = &self.version;
        match (&v.version, &v.commit) {
            (Some(version), Some(commit)) if commit != "unknown" => format!("{version} ({commit})"),
            (Some(version), _) => version.clone(),
            (None, Some(commit)) => commit.clone(),
            (None, None) => "unknown".to_owned(),
        }
    }
}

/// Parses `--version`: `version: 0.5.0-dev (build 0, commit 0c1e570)` (current llama.cpp) or
/// `version: 3859 (9a0e35dc)` (older trees), then `built with GNU 12.2.0 for Linux x86_64`.
pub fn parse_version(text: &str) -> VersionInfo {
    let mut info = VersionInfo::default();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("version:") {
            let rest = rest.trim();
            let (head, inside) = match (rest.find('('), rest.rfind(')')) {
                (Some(open), Some(close)) if open < close => {
                    (rest[..open].trim(), Some(&rest[open + 1..close]))
                }
                _ => (rest, None),
            };
            if !head.is_empty() {
                info.version = Some(head.to_owned());
            }
            match inside {
                Some(inside) if inside.contains("commit") || inside.contains("build") => {
                    for part in inside.split(',').map(str::trim) {
                        if let Some(n) = part.strip_prefix("build ") {
                            info.build_number = n.trim().parse().ok();
                        } else if let Some(c) = part.strip_prefix("commit ") {
                            info.commit = Some(c.trim().to_owned());
                        }
                    }
                }
                Some(inside) => {
                    info.commit = Some(inside.trim().to_owned());
                    info.build_number = head.parse().ok();
                }
                None => {}
            }
        } else if let Some(rest) = line.strip_prefix("built with ") {
            match rest.rsplit_once(" for ") {
                Some((compiler, target)) => {
                    info.compiler = Some(compiler.trim().to_owned());
                    info.target = Some(target.trim().to_owned());
                }
                None => info.compiler = Some(rest.trim().to_owned()),
            }
        }
    }
    info
}

/// A word that names an option: `-ot`, `--n-cpu-moe`, `--no-mmap` (not `-1`, not `-`).
fn is_option_word(word: &str) -> bool {
    let name = word
        .strip_prefix("--")
        .or_else(|| word.strip_prefix('-'))
        .unwrap_or("");
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The option names a `--help` text lists. llama.cpp prints each option at the start of a line
/// (`-ot,   --override-tensor <pattern>=<buffer type>,...`) with its description at column 40;
/// older trees and ik_llama.cpp indent options by two spaces, or nine for a long option without
/// a short one (`         --mlock`). Description lines that happen to start with a dash sit
/// further right (column 34 or 40) and are ignored.
pub fn parse_help_options(help: &str) -> BTreeSet<String> {
    let mut options = BTreeSet::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim_start();
        if indent > MAX_OPTION_INDENT || !text.starts_with('-') {
            continue;
        }
        for word in text.split(|c: char| c.is_whitespace() || c == ',') {
            if word.is_empty() {
                continue;
            }
            // `--fit [on|off]` or `--ctx-size=N`: the name ends where the value begins.
            let name = word.split('=').next().unwrap_or(word);
            if !is_option_word(name) {
                break;
            }
            options.insert(name.to_owned());
        }
    }
    options
}

/// The deepest indent of a line that names options (ik_llama.cpp's long-only options at 9).
const MAX_OPTION_INDENT: usize = 12;

/// The choices printed after `option` in the help: llama.cpp's `--spec-type none,draft-simple,…`
/// or ik_llama.cpp's `--spec-type Name [none | ngram - cache | ngram - mod]`.
fn option_choices(help: &str, option: &str) -> Vec<String> {
    let Some(rest) = help.lines().find_map(|line| {
        let at = line
            .split_whitespace()
            .position(|w| w.trim_end_matches(',') == option)?;
        Some(
            line.split_whitespace()
                .skip(at + 1)
                .collect::<Vec<_>>()
                .join(" "),
        )
    }) else {
        return Vec::new();
    };
    let list = match (rest.find('['), rest.find(']')) {
        (Some(open), Some(close)) if open < close => rest[open + 1..close].replace(" - ", "-"),
        _ => rest.split_whitespace().next().unwrap_or("").to_owned(),
    };
    list.split([',', '|'])
        .map(|t| t.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-'))
        .filter(|t| !t.is_empty() && *t != "none" && !t.starts_with('<'))
        .map(str::to_owned)
        .collect()
}

/// The [`Features`] behind an option list (and the help text, for `--spec-type`'s choices).
pub fn detect_features(options: &BTreeSet<String>, help: &str) -> Features {
    let any = |names: &[&str]| names.iter().any(|n| options.contains(*n));
    let speculative_types: Vec<String> = if options.contains("--spec-type") {
        option_choices(help, "--spec-type")
    } else {
        Vec::new()
    };
    let mtp = speculative_types.iter().any(|t| t.contains("mtp"))
        || options
            .iter()
            .any(|o| o.trim_start_matches('-').split('-').any(|w| w == "mtp"));
    Features {
        override_tensor: any(&["-ot", "--override-tensor"]),
        fit: any(&["--fit", "-fit"]),
        n_cpu_moe: any(&["--n-cpu-moe", "-ncmoe"]),
        cpu_moe: any(&["--cpu-moe", "-cmoe"]),
        speculative: any(&[
            "-md",
            "--model-draft",
            "--spec-draft-model",
            "--draft",
            "--draft-max",
            "--spec-type",
        ]),
        speculative_types,
        mtp,
        metrics: any(&["--metrics"]),
        jinja: any(&["--jinja"]),
        reasoning: any(&["--reasoning", "-rea"]),
        reasoning_budget: any(&["--reasoning-budget"]),
        flash_attn: any(&["-fa", "--flash-attn"]),
        fused_moe: any(&["-fmoe", "--fused-moe", "-no-fmoe", "--no-fused-moe"]),
        run_time_repack: any(&["-rtr", "--run-time-repack"]),
        mla: any(&["-mla", "--mla-use"]),
        attn_max_batch: any(&["-amb", "--attention-max-batch"]),
    }
}

/// Where each Python engine lists its speculative methods, and the names it may list there.
fn python_method_sources(
    kind: super::EngineKind,
) -> (&'static [&'static str], &'static [&'static str]) {
    use super::EngineKind;
    match kind {
        EngineKind::Vllm => (
            &["vllm/config/speculative.py", "vllm/config.py"],
            &[
                "ngram",
                "eagle",
                "eagle3",
                "draft_model",
                "mtp",
                "medusa",
                "suffix",
            ],
        ),
        EngineKind::Sglang => (
            &["sglang/srt/server_args.py"],
            &["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"],
        ),
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => (&[], &[]),
    }
}

/// The speculative methods an installed vLLM or SGLang accepts, read from its own source (the
/// method names quoted in its speculative config or server arguments) without importing it:
/// importing pulls in torch and takes long. An install whose source is not where it is expected
/// is taken to have every method of its engine.
pub fn python_speculative_methods(venv: &Path, kind: super::EngineKind) -> Vec<String> {
    let (files, names) = python_method_sources(kind);
    let site_packages = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("site-packages"));
    let text: String = site_packages
        .flat_map(|site| files.iter().map(move |f| site.join(f)))
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .collect();
    names
        .iter()
        .filter(|name| {
            text.is_empty()
                || text.contains(&format!("\"{name}\""))
                || text.contains(&format!("'{name}'"))
        })
        .map(|name| (*name).to_owned())
        .collect()
}

/// The backend named by `--list-devices` output or the ggml log lines a build prints
/// (`CUDA0: NVIDIA …`, `ggml_cuda_init: …`, `Vulkan0: …`). `None` when nothing names one.
pub fn backend_from_device_list(text: &str) -> Option<Backend> {
    let lower = text.to_ascii_lowercase();
    let has_device = |prefix: &str| {
        lower.lines().any(|l| {
            let l = l.trim_start();
            l.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
    };
    if has_device("cuda") || lower.contains("ggml_cuda_init") {
        Some(Backend::Cuda)
    } else if has_device("rocm") || has_device("hip") || lower.contains("ggml_hip") {
        Some(Backend::Rocm)
    } else if has_device("vulkan") || lower.contains("ggml_vulkan") {
        Some(Backend::Vulkan)
    } else {
        None
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("'{path}' does not exist")]
    NotFound { path: PathBuf },
    #[error("'{path}' is not an executable file: give the path of the llama-server binary")]
    NotExecutable { path: PathBuf },
    #[error("cannot run '{path}': {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("'{path}' did not answer `{arg}` within {} s: it does not look like an engine binary", PROBE_TIMEOUT.as_secs())]
    Timeout { path: PathBuf, arg: &'static str },
    #[error("'{path}' is not a llama.cpp server binary: its --help lists no --model and --port options (give the path of llama-server, not llama-cli or llama-bench)")]
    NotAnEngine { path: PathBuf },
}

/// stdout and stderr of `binary arg`, killed after [`PROBE_TIMEOUT`]. The exit code does not
/// matter: some builds exit non-zero after printing their help.
pub(crate) async fn run_for_text(binary: &Path, arg: &'static str) -> Result<String, ProbeError> {
    let mut command = Command::new(binary);
    command
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(PROBE_TIMEOUT, command.output())
        .await
        .map_err(|_| ProbeError::Timeout {
            path: binary.to_owned(),
            arg,
        })?
        .map_err(|source| ProbeError::Spawn {
            path: binary.to_owned(),
            source,
        })?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok(text)
}

/// Runs `--version` and `--help` on a llama.cpp-family server binary and reads what it can do.
/// Fails when the file is no such binary.
pub async fn probe_binary(binary: &Path) -> Result<Capabilities, ProbeError> {
    if !binary.exists() {
        return Err(ProbeError::NotFound {
            path: binary.to_owned(),
        });
    }
    if !is_executable_file(binary) {
        return Err(ProbeError::NotExecutable {
            path: binary.to_owned(),
        });
    }
    let help = run_for_text(binary, "--help").await?;
    let options = parse_help_options(&help);
    if !(options.contains("--model") && options.contains("--port")) {
        return Err(ProbeError::NotAnEngine {
            path: binary.to_owned(),
        });
    }
    let version = run_for_text(binary, "--version").await?;
    Ok(Capabilities::from_outputs(&version, &help))
}

/// The backend a registered binary was built for: a shared ggml backend library next to it, or
/// the devices it lists. CPU when nothing says otherwise.
pub async fn detect_backend(binary: &Path) -> Backend {
    if let Some(dir) = binary.parent() {
        for (lib, backend) in [
            ("libggml-cuda.so", Backend::Cuda),
            ("libggml-hip.so", Backend::Rocm),
            ("libggml-vulkan.so", Backend::Vulkan),
        ] {
            if dir.join(lib).exists() {
                return backend;
            }
        }
    }
    match run_for_text(binary, "--list-devices").await {
        Ok(text) => backend_from_device_list(&text).unwrap_or(Backend::Cpu),
        Err(_) => Backend::Cpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An excerpt in llama.cpp's help layout (options at column 0, help at column 40), written
    /// for this test; the engine-build integration test checks the parser on a real binary.
    const HELP: &str = "\
----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
-t,    --threads N                      number of CPU threads to use during generation
-c,    --ctx-size N                     size of the prompt context
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto')
--list-devices                          print list of available devices and exit
-ot,   --override-tensor <tensor name pattern>=<buffer type>,...
                                        override tensor buffer type
-cmoe, --cpu-moe                        keep all Mixture of Experts (MoE) weights in the CPU
-ncmoe, --n-cpu-moe N                   keep the MoE weights of the first N layers in the CPU
-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM
                                        - none: no split
                                        -1 = all layers
-fit,  --fit [on|off]                   fit unset arguments to the device memory
-m,    --model FNAME                    model path to load

----- speculative params -----

--spec-draft-model, -md, --model-draft FNAME
                                        draft model for speculative decoding
--spec-type none,draft-simple,draft-eagle3,draft-mtp,ngram-simple
                                        comma-separated list of types of speculative decoding
--draft, --draft-n, --draft-max N       number of tokens to draft

----- example-specific params -----

--port PORT                             port to listen (default: 8080)
--metrics                               enable prometheus compatible metrics endpoint
--jinja, --no-jinja                     use jinja template for chat
-rea,  --reasoning [on|off|auto]        use reasoning/thinking in the chat
--reasoning-budget N                    token budget for thinking
";

    #[test]
    fn help_options_are_read_from_the_start_of_lines_only() {
        let options = parse_help_options(HELP);
        for expected in [
            "-h",
            "--help",
            "--usage",
            "-ot",
            "--override-tensor",
            "-ncmoe",
            "--n-cpu-moe",
            "-ngl",
            "--gpu-layers",
            "--n-gpu-layers",
            "--fit",
            "-fit",
            "--spec-draft-model",
            "-md",
            "--model-draft",
            "--no-jinja",
            "--port",
            "-rea",
        ] {
            assert!(
                options.contains(expected),
                "{expected} missing from {options:?}"
            );
        }
        // Values and description lines are not options.
        for absent in ["N", "-1", "-", "--none", "<tensor", "on", "FNAME"] {
            assert!(
                !options.contains(absent),
                "{absent} wrongly read as an option"
            );
        }
    }

    #[test]
    fn features_follow_the_options() {
        let caps = Capabilities::from_outputs("", HELP);
        let f = &caps.features;
        assert!(f.override_tensor && f.fit && f.n_cpu_moe && f.cpu_moe);
        assert!(f.speculative && f.mtp && f.metrics && f.jinja);
        assert!(f.reasoning && f.reasoning_budget && f.flash_attn);
        assert_eq!(
            f.speculative_types,
            ["draft-simple", "draft-eagle3", "draft-mtp", "ngram-simple"]
        );
        assert!(caps.accepts("--ctx-size"));
        assert!(!caps.accepts("--made-up"));

        let old =
            Capabilities::from_outputs("", "  -m, --model FNAME   model\n  --port PORT   port\n");
        assert_eq!(old.features, Features::default());
        assert!(old.accepts("--model"));
    }

    #[test]
    fn version_lines_in_both_formats() {
        let current = parse_version(
            "version: 0.5.0-dev (build 0, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n",
        );
        assert_eq!(current.version.as_deref(), Some("0.5.0-dev"));
        assert_eq!(current.build_number, Some(0));
        assert_eq!(current.commit.as_deref(), Some("0c1e570"));
        assert_eq!(current.compiler.as_deref(), Some("GNU 12.2.0"));
        assert_eq!(current.target.as_deref(), Some("Linux x86_64"));

        let older = parse_version("ggml_cuda_init: found 1 CUDA devices\nversion: 3859 (9a0e35dc)\nbuilt with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu\n");
        assert_eq!(older.version.as_deref(), Some("3859"));
        assert_eq!(older.build_number, Some(3859));
        assert_eq!(older.commit.as_deref(), Some("9a0e35dc"));
        assert_eq!(older.target.as_deref(), Some("x86_64-linux-gnu"));

        assert_eq!(parse_version("nothing useful"), VersionInfo::default());
        let caps = Capabilities {
            version: current,
            ..Capabilities::default()
        };
        assert_eq!(caps.version_label(), "0.5.0-dev (0c1e570)");
    }

    #[test]
    fn device_lists_name_the_backend() {
        assert_eq!(
            backend_from_device_list("Available devices:\n  CUDA0: NVIDIA GeForce RTX 3090 (24135 MiB, 23811 MiB free)\n"),
            Some(Backend::Cuda)
        );
        assert_eq!(
            backend_from_device_list("ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\nAvailable devices:\n"),
            Some(Backend::Cuda)
        );
        assert_eq!(
            backend_from_device_list(
                "Available devices:\n  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31)\n"
            ),
            Some(Backend::Vulkan)
        );
        assert_eq!(backend_from_device_list("Available devices:\n"), None);
    }

    #[tokio::test]
    async fn a_program_that_is_not_an_engine_is_refused() {
        // `true` prints nothing: no --model/--port options.
        let true_bin = super::super::find_in_path("true").expect("coreutils' true on PATH");
        let err = probe_binary(&true_bin).await.unwrap_err();
        assert!(matches!(err, ProbeError::NotAnEngine { .. }), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "hello").unwrap();
        let err = probe_binary(&text).await.unwrap_err();
        assert!(matches!(err, ProbeError::NotExecutable { .. }), "{err}");
        let err = probe_binary(&dir.path().join("absent")).await.unwrap_err();
        assert!(matches!(err, ProbeError::NotFound { .. }), "{err}");
    }

    /// Lines of ik_llama.cpp's `llama-server --help` (ik-llama-cpp-python 0.1.5), spacing kept.
    const IK_HELP: &str = "usage: llama-server [options]

general:

  -h,    --help, --usage          print usage and exit
         --version                show version and build info
  -t,    --threads N              number of threads to use during generation (default: 2)
  -mla,  --mla-use                enable MLA (default: 3)
  -amb,  --attention-max-batch    max batch size for attention computations (default: 0)
  -no-fmoe, --no-fused-moe        disable fused MoE (default: enabled)
         --mlock                  force system to keep model in RAM rather than swapping or compressing
         --run-time-repack        repack tensors if interleaved variant is available
  -m,    --model FNAME            model path (default: models/$filename with filename from --hf-file
                                  -- not an option, a description line
  -mtp, --multi-token-prediction  whether to use multi-token-prediction (if supported) (default: false)
  -md,   --model-draft FNAME      draft model for speculative decoding (default: unused)
  --draft-max, --draft, --draft-n N
                                  number of tokens to draft for speculative decoding (default: 16)
  --spec-type Name [none | ngram - cache | ngram - simple | ngram - map - k | ngram - map - k4v | ngram - mod]
                                  type of speculative decoding to use when no draft model is provided (default: 0)
         --port PORT              port to listen (default: 8080)
         --metrics                enable prometheus compatible metrics endpoint (default: disabled)
";

    #[test]
    fn reads_ik_llama_cpp_help_with_its_indents_and_spec_types() {
        let caps = Capabilities::from_outputs("version: 0 (py0.1.5)\n", IK_HELP);
        for option in [
            "--version",
            "--mlock",
            "--run-time-repack",
            "--port",
            "--metrics",
            "-mtp",
            "--draft-max",
            "--draft",
        ] {
            assert!(
                caps.accepts(option),
                "{option} missing from {:?}",
                caps.options
            );
        }
        assert!(!caps.accepts("--"), "a description line is no option");
        assert_eq!(
            caps.features.speculative_types,
            [
                "ngram-cache",
                "ngram-simple",
                "ngram-map-k",
                "ngram-map-k4v",
                "ngram-mod"
            ]
        );
        let f = &caps.features;
        assert!(
            f.mla && f.attn_max_batch && f.run_time_repack && f.fused_moe && f.mtp && f.metrics
        );
        assert_eq!(
            caps.spelling(&["-rtr", "--run-time-repack"]),
            Some("--run-time-repack")
        );
        assert_eq!(caps.version.commit.as_deref(), Some("py0.1.5"));
    }
}
