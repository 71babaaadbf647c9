//! The real llama-bench (Rigdeck's cached portable CPU build of the bundled llama.cpp, the sibling
//! of its llama-server; built on first use like every real-engine test, or the one next to
//! `RIGDECK_LLAMA_SERVER` when that is set) against the tiny model written by the project's GGUF
//! writer, with the flags of a launch profile translated by `bench_flags`.
//!
//! Checks: pp16 and tg8 at depths 0 and 16 give four tests with positive speeds, two samples each
//! and their statistics, labelled and reporting the translated settings; a model that does not
//! load and a buffer type the build lacks are failures that say why. Nothing asserts a speed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rigdeck_bench::llama_bench::{self, LlamaBenchSpec};
use rigdeck_engines::cmake_build::{self, BuildRequest};
use rigdeck_engines::source;
use tokio::sync::{watch, OnceCell};

const RUN_LIMIT: Duration = Duration::from_secs(180);

static LLAMA_BENCH: OnceCell<PathBuf> = OnceCell::const_new();

/// llama-bench next to the llama-server the other real-engine tests use.
async fn llama_bench() -> &'static Path {
    LLAMA_BENCH
        .get_or_init(|| async {
            let server = match std::env::var_os("RIGDECK_LLAMA_SERVER").filter(|v| !v.is_empty()) {
                Some(path) => {
                    let path = PathBuf::from(path);
                    assert!(
                        path.is_file(),
                        "RIGDECK_LLAMA_SERVER={} does not exist: it must name a built llama-server",
                        path.display()
                    );
                    path
                }
                None => {
                    let cache =
                        source::cache_root().expect("a cache folder (RIGDECK_CACHE_DIR or HOME)");
                    let request = BuildRequest::shared_cpu(cache);
                    cmake_build::build(&request, &|_| {})
                        .await
                        .unwrap_or_else(|err| panic!("{err}"))
                        .llama_server
                }
            };
            let bench = server.with_file_name("llama-bench");
            assert!(
                bench.is_file(),
                "no llama-bench next to {}: the build must install it",
                server.display()
            );
            bench
        })
        .await
}

/// `ggml-vocab-llama-bpe.gguf` from the cached llama.cpp source tree (a real tokenizer).
fn tiny_model(dir: &Path) -> PathBuf {
    let vocab = source::cached_llama_cpp_source()
        .unwrap_or_else(|err| panic!("{err}"))
        .join("models/ggml-vocab-llama-bpe.gguf");
    let model = dir.join("tiny.gguf");
    rigdeck_gguf::tiny::TinyModel::dense_runnable()
        .write(&vocab, &model)
        .expect("write the tiny model");
    model
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pp_and_tg_at_two_depths_with_a_profiles_flags() {
    let program = llama_bench().await;
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    // What `rigdeck_placement::flags::to_args` writes for a CPU profile, plus extras.
    let mut server = vec!["-m".to_owned(), model.display().to_string()];
    server.extend(words(
        "-ngl all -sm layer -ot output=CPU -c 512 -ctk f16 -ctv f16 -fa off -np 1 -b 256 -ub 64 \
         -t 1 -no-kvu --host 127.0.0.1 --port 0 --metrics",
    ));
    let (flags, dropped) = llama_bench::bench_flags(&server);
    assert_eq!(
        dropped,
        vec![
            "-c 512",
            "-np 1",
            "-no-kvu",
            "--host 127.0.0.1",
            "--port 0",
            "--metrics"
        ]
    );
    let spec = LlamaBenchSpec {
        prompt_tokens: vec![16],
        gen_tokens: vec![8],
        depths: vec![0, 16],
        repetitions: 2,
    };
    spec.validate().unwrap();
    let argv = llama_bench::argv(program, &flags, &spec);
    let (_cancel, cancelled) = watch::channel(false);
    let run = llama_bench::run(&argv, &[], cancelled, RUN_LIMIT)
        .await
        .unwrap_or_else(|err| panic!("{err}"));

    let labels: Vec<&str> = run.tests.iter().map(|t| t.test.as_str()).collect();
    assert_eq!(
        labels,
        vec!["pp16 @ d0", "tg8 @ d0", "pp16 @ d16", "tg8 @ d16"],
        "{run:?}"
    );
    for t in &run.tests {
        assert!(t.avg_ts > 0.0, "{t:?}");
        assert_eq!(t.samples_ts.len(), 2, "{t:?}");
        assert!(t.samples_ts.iter().all(|s| *s > 0.0), "{t:?}");
        let stats = t.stats.expect("statistics of the samples");
        assert_eq!(stats.n, 2);
        assert!(stats.min > 0.0);
        // The translated profile is what ran.
        assert_eq!(t.n_threads, Some(1));
        assert_eq!(t.n_gpu_layers, Some(999));
        assert_eq!((t.n_batch, t.n_ubatch), (Some(256), Some(64)));
        assert_eq!(t.flash_attn.as_deref(), Some("off"));
        assert_eq!(t.tensor_buft_overrides.as_deref(), Some("output=CPU"));
        assert!(t.build_commit.is_some() && t.backends.is_some(), "{t:?}");
        assert!(t
            .model_type
            .as_deref()
            .is_some_and(|m| m.starts_with("llama")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_say_why() {
    let program = llama_bench().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = LlamaBenchSpec {
        prompt_tokens: vec![8],
        gen_tokens: vec![4],
        depths: vec![0],
        repetitions: 1,
    };
    let (_cancel, cancelled) = watch::channel(false);

    // A model that does not load: the binary named, llama.cpp's reason kept.
    let missing = dir.path().join("missing.gguf");
    let (flags, _) = llama_bench::bench_flags(&[
        "-m".to_owned(),
        missing.display().to_string(),
        "-t".to_owned(),
        "1".to_owned(),
    ]);
    let err = llama_bench::run(
        &llama_bench::argv(program, &flags, &spec),
        &[],
        cancelled.clone(),
        RUN_LIMIT,
    )
    .await
    .unwrap_err();
    assert!(err.contains(&program.display().to_string()), "{err}");
    assert!(err.contains("failed to load model"), "{err}");

    // A buffer type no build has: llama-bench prints an error and would measure without the
    // override, so the run fails instead.
    let model = tiny_model(dir.path());
    let (flags, _) = llama_bench::bench_flags(&[
        "-m".to_owned(),
        model.display().to_string(),
        "-ot".to_owned(),
        "exps=NoSuchDevice0".to_owned(),
        "-t".to_owned(),
        "1".to_owned(),
    ]);
    let err = llama_bench::run(
        &llama_bench::argv(program, &flags, &spec),
        &[],
        cancelled,
        RUN_LIMIT,
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("unrecognized buffer type 'NoSuchDevice0'"),
        "{err}"
    );
}
