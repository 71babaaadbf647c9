//! Engine builds through Rigdeck's own build path, with real CMake and Ninja.
//!
//! The first test builds the bundled llama.cpp (pinned `llama-cpp-python` sdist) portably for the
//! CPU into the cache outside the checkout (`$RIGDECK_CACHE_DIR`, default `~/.cache/rigdeck`):
//! the one build the other tests run and the packages ship (`installer/package.sh` builds the
//! same folder). About ten minutes on two cores the first time, seconds afterwards, when the
//! cached build is reused.
//! The others check the failures: a tampered archive and a CMake error in each step.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use rigdeck_core::engines::cmake_build::{
    self, default_build_dir, shared_cpu_build_dir, BuildError, BuildProgress, BuildRequest,
    BuildStep,
};
use rigdeck_core::engines::registry::{self, Availability};
use rigdeck_core::engines::source::{
    self, PinnedSource, SourceError, SourceSpec, BUNDLED_LLAMA_CPP,
};
use rigdeck_core::engines::{Backend, EngineKind};
use rigdeck_core::store::Store;

/// Collects the progress reports and echoes step changes (shown when a test fails).
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<BuildProgress>>,
}

impl Recorder {
    fn sink(&self) -> impl Fn(BuildProgress) + Send + Sync + '_ {
        move |progress: BuildProgress| {
            let mut events = self.events.lock().unwrap();
            let step_changed = events.last().map(|e| e.step) != Some(progress.step);
            let tenth = |p: &BuildProgress| p.fraction.map(|f| (f * 10.0) as u32);
            let decile_changed = events.last().map(tenth) != Some(tenth(&progress));
            if step_changed || (progress.step == BuildStep::Compile && decile_changed) {
                eprintln!(
                    "[{}] {} {}",
                    progress.step,
                    progress
                        .fraction
                        .map(|f| format!("{:3.0}%", f * 100.0))
                        .unwrap_or_default(),
                    progress.line.as_deref().unwrap_or("")
                );
            }
            events.push(progress);
        }
    }

    fn take(&self) -> Vec<BuildProgress> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

fn bundled() -> SourceSpec {
    SourceSpec::pinned(EngineKind::LlamaCpp, None).expect("llama.cpp has a pinned source")
}

fn cpu_request(source: SourceSpec, engines_dir: &Path, cache_dir: &Path) -> BuildRequest {
    BuildRequest {
        kind: EngineKind::LlamaCpp,
        source,
        backend: Backend::Cpu,
        cuda_architectures: None,
        engines_dir: engines_dir.to_owned(),
        build_dir: None,
        cache_dir: cache_dir.to_owned(),
        jobs: None,
        portable: false,
    }
}

/// ik_llama.cpp from the pinned `ik-llama-cpp-python` sdist: its CPU build (about half an hour
/// on two cores the first time), cached beside llama.cpp's for the tests that serve with it.
#[tokio::test]
async fn builds_the_pinned_ik_llama_cpp_with_its_server_and_bench() {
    let cache = source::cache_root().expect("a cache folder (set RIGDECK_CACHE_DIR or HOME)");
    let request = BuildRequest {
        kind: EngineKind::IkLlamaCpp,
        ..cpu_request(
            SourceSpec::pinned(EngineKind::IkLlamaCpp, None).expect("a pinned source"),
            &cache.join("engines"),
            &cache,
        )
    };
    let recorder = Recorder::default();
    let built = cmake_build::build(&request, &recorder.sink())
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        built.build_dir,
        default_build_dir(
            &cache.join("engines"),
            EngineKind::IkLlamaCpp,
            "py0.1.5",
            Backend::Cpu,
            false
        )
    );
    assert_eq!(
        built.source_sha256.as_deref(),
        Some(&*source::BUNDLED_IK_LLAMA_CPP.sha256)
    );
    for name in ["llama-server", "llama-bench"] {
        assert!(built.bin_dir.join(name).is_file(), "{name} missing");
    }
    let version = std::process::Command::new(&built.llama_server)
        .arg("--version")
        .output()
        .expect("llama-server --version");
    let text = String::from_utf8_lossy(&version.stderr).into_owned()
        + &String::from_utf8_lossy(&version.stdout);
    assert!(
        text.contains("py0.1.5"),
        "--version names the pinned sdist: {text}"
    );
}

#[tokio::test]
async fn builds_the_bundled_llama_cpp_registers_it_and_reuses_the_cache() {
    let cache = source::cache_root().expect("a cache folder (set RIGDECK_CACHE_DIR or HOME)");
    let engines_dir = cache.join("engines");
    let request = BuildRequest::shared_cpu(cache.clone());
    assert!(request.portable, "the build the packages ship");
    let recorder = Recorder::default();
    let sink = recorder.sink();

    let started = Instant::now();
    let built = cmake_build::build(&request, &sink)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    eprintln!(
        "first run: {:.1} s (reused an earlier build: {})",
        started.elapsed().as_secs_f64(),
        built.reused
    );
    assert_eq!(
        built.build_dir,
        default_build_dir(
            &engines_dir,
            EngineKind::LlamaCpp,
            "0c1e570",
            Backend::Cpu,
            true
        )
    );
    assert_eq!(built.build_dir, shared_cpu_build_dir(&cache));
    assert!(built.build_dir.ends_with("llama.cpp-0c1e570-cpu-portable"));
    assert_eq!(built.llama_server, built.build_dir.join("bin/llama-server"));
    if std::env::var_os("RIGDECK_LLAMA_BIN_DIR").is_none() {
        assert_eq!(
            source::cached_llama_cpp_bin().unwrap_or_else(|err| panic!("{err}")),
            built.bin_dir,
            "the oracle tests and benchmarks find this very build"
        );
    }
    for name in rigdeck_core::engines::cmake_build::WANTED_TARGETS {
        let binary = built.bin_dir.join(name);
        assert!(built.binaries.contains(&binary), "{name} not installed");
        assert!(binary.is_file(), "{} missing", binary.display());
    }
    assert_eq!(
        built.source_sha256.as_deref(),
        Some(&*BUNDLED_LLAMA_CPP.sha256)
    );
    let events = recorder.take();
    assert_eq!(events.last().map(|e| e.step), Some(BuildStep::Done));
    assert!(events.iter().all(|e| e.build_id == built.build_id));
    if !built.reused {
        let fractions: Vec<f64> = events
            .iter()
            .filter(|e| e.step == BuildStep::Compile)
            .filter_map(|e| e.fraction)
            .collect();
        assert!(
            fractions.windows(2).all(|w| w[0] <= w[1]),
            "compile progress never goes back"
        );
        assert_eq!(
            fractions.last().copied(),
            Some(1.0),
            "Ninja's [N/M] reached M"
        );
        assert!(events.iter().any(|e| e.step == BuildStep::Configure));
        let log = std::fs::read_to_string(&built.log_file).unwrap();
        assert!(
            log.contains("-DLLAMA_CURL=OFF")
                && log.contains("-DGGML_NATIVE=OFF")
                && log.contains("--target llama-server")
        );
    }

    // Registered with the capabilities its own --version and --help report.
    let db = tempfile::tempdir().unwrap();
    let store = Store::open(&db.path().join("rigdeck.db")).await.unwrap();
    let entry = registry::register_built(&store, &built, 1_000)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let caps = &entry.capabilities;
    eprintln!("version: {}", entry.version);
    eprintln!("features: {:#?}", caps.features);
    eprintln!("{} options", caps.options.len());
    assert_eq!(entry.kind, EngineKind::LlamaCpp);
    assert_eq!(entry.status, Availability::Ready);
    assert_eq!(entry.location, built.llama_server);
    assert_eq!(caps.version.commit.as_deref(), Some("0c1e570"));
    let f = &caps.features;
    assert!(f.override_tensor, "-ot");
    assert!(f.fit, "--fit");
    assert!(f.n_cpu_moe, "--n-cpu-moe");
    assert!(f.metrics, "--metrics");
    assert!(f.cpu_moe && f.flash_attn && f.jinja && f.reasoning && f.reasoning_budget);
    assert!(
        f.speculative && f.mtp,
        "speculative decoding with MTP drafts"
    );
    for option in [
        "-ngl",
        "--n-gpu-layers",
        "--tensor-split",
        "-c",
        "--host",
        "--port",
        "-np",
    ] {
        assert!(
            caps.accepts(option),
            "{option} missing from the parsed help"
        );
    }
    assert!(!caps.accepts("--made-up-flag"));

    // The second run finds the binaries and the matching source hash: no CMake at all.
    let started = Instant::now();
    let again = cmake_build::build(&request, &sink)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    eprintln!("cached rerun: {:.2} s", started.elapsed().as_secs_f64());
    assert!(
        again.reused,
        "second run rebuilt instead of reusing the cache"
    );
    assert_eq!(again.llama_server, built.llama_server);
    let events = recorder.take();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.step, BuildStep::Fetch | BuildStep::Configure)),
        "{events:#?}"
    );
}

/// Bytes standing in for an archive; their sha256 is known (computed once with `sha256sum`).
const FAKE_ARCHIVE: &[u8] = b"a small stand-in for a source archive\n";
const FAKE_ARCHIVE_SHA256: &str =
    "0129c4ee676b794e6a3d1be3505bfc0b9be60f7a5bf76870b5fc6f8fd6a67722";

#[test]
fn the_verifier_accepts_the_known_file_and_names_everything_when_tampered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake-1.0.tar.gz");
    std::fs::write(&path, FAKE_ARCHIVE).unwrap();
    let pin = PinnedSource {
        sha256: FAKE_ARCHIVE_SHA256.into(),
        file_name: "fake-1.0.tar.gz".into(),
        ..BUNDLED_LLAMA_CPP.clone()
    };
    source::verify_pinned_archive(&path, &pin).expect("the untouched file verifies");

    let mut tampered = FAKE_ARCHIVE.to_vec();
    tampered[0] ^= 1;
    std::fs::write(&path, &tampered).unwrap();
    let actual = source::sha256_file(&path).unwrap();
    let err = source::verify_pinned_archive(&path, &pin).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, SourceError::HashMismatch { .. }), "{text}");
    assert!(
        text.contains(&path.display().to_string()),
        "names the file: {text}"
    );
    assert!(
        text.contains(FAKE_ARCHIVE_SHA256),
        "names the expected hash: {text}"
    );
    assert!(text.contains(&actual), "names the actual hash: {text}");
    assert!(
        text.contains("delete it to download it again"),
        "says the fix: {text}"
    );
}

#[tokio::test]
async fn a_damaged_cached_archive_stops_the_build_before_anything_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cached = source::sources_dir(&cache).join(&*BUNDLED_LLAMA_CPP.file_name);
    std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
    std::fs::write(&cached, FAKE_ARCHIVE).unwrap();
    let engines = dir.path().join("engines");
    let recorder = Recorder::default();

    let err = cmake_build::build(&cpu_request(bundled(), &engines, &cache), &recorder.sink())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, BuildError::Source(SourceError::HashMismatch { .. })),
        "{text}"
    );
    assert!(text.contains(&cached.display().to_string()) && text.contains(FAKE_ARCHIVE_SHA256));
    assert!(text.contains(&*BUNDLED_LLAMA_CPP.sha256), "{text}");
    assert!(!engines.exists(), "nothing built");
    let events = recorder.take();
    assert_eq!(events.last().map(|e| e.step), Some(BuildStep::Failed));

    // A user's archive with a sha256 that does not match is refused the same way.
    let err = cmake_build::build(
        &cpu_request(
            SourceSpec::Archive {
                path: cached.clone(),
                sha256: Some(BUNDLED_LLAMA_CPP.sha256.to_string()),
            },
            &engines,
            &cache,
        ),
        &recorder.sink(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains(FAKE_ARCHIVE_SHA256), "{err}");
    assert!(!engines.exists(), "nothing built");
}

/// A source folder that `find_source_tree` accepts, with the given CMakeLists.txt.
fn tiny_tree(root: &Path, cmakelists: &str, files: &[(&str, &str)]) -> PathBuf {
    let tree = root.join("tree");
    std::fs::create_dir_all(tree.join("include")).unwrap();
    std::fs::write(tree.join("include/llama.h"), "/* stand-in */\n").unwrap();
    std::fs::write(tree.join("CMakeLists.txt"), cmakelists).unwrap();
    for (name, text) in files {
        std::fs::write(tree.join(name), text).unwrap();
    }
    tree
}

#[tokio::test]
async fn a_cmake_error_names_the_configure_step_and_shows_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let tree = tiny_tree(
        dir.path(),
        "cmake_minimum_required(VERSION 3.14)\nproject(broken NONE)\nmessage(FATAL_ERROR \"broken on purpose\")\n",
        &[],
    );
    let recorder = Recorder::default();
    let err = cmake_build::build(
        &cpu_request(
            SourceSpec::Folder(tree),
            &dir.path().join("engines"),
            &dir.path().join("cache"),
        ),
        &recorder.sink(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    let BuildError::Cmake {
        step, code, log, ..
    } = &err
    else {
        panic!("expected a CMake error, got {text}");
    };
    assert_eq!(*step, BuildStep::Configure);
    assert_eq!(*code, Some(1));
    assert!(
        text.contains("CMake configure step failed (exit code 1)"),
        "{text}"
    );
    assert!(text.contains("broken on purpose"), "{text}");
    assert!(text.contains(&log.display().to_string()), "{text}");
    let full_log = std::fs::read_to_string(log).unwrap();
    assert!(full_log.contains("broken on purpose") && full_log.contains("-G Ninja"));
    let events = recorder.take();
    assert_eq!(events.last().map(|e| e.step), Some(BuildStep::Failed));
    assert!(events
        .last()
        .and_then(|e| e.line.as_deref())
        .is_some_and(|l| l.contains("broken on purpose")));
}

#[tokio::test]
async fn a_compiler_error_names_the_compile_step() {
    let dir = tempfile::tempdir().unwrap();
    let tree = tiny_tree(
        dir.path(),
        "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\nadd_executable(llama-server server.c)\n",
        &[("server.c", "#error does not compile on purpose\nint main(void) { return 0; }\n")],
    );
    let err = cmake_build::build(
        &cpu_request(
            SourceSpec::Folder(tree),
            &dir.path().join("engines"),
            &dir.path().join("cache"),
        ),
        &|_| {},
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            BuildError::Cmake {
                step: BuildStep::Compile,
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("CMake compile step failed"), "{text}");
    assert!(text.contains("does not compile on purpose"), "{text}");
}
