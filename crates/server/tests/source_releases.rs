//! A llama.cpp source newer than the bundled pin: `rigdeck engines versions llama.cpp` lists the
//! releases of the package its source comes in against the pin and the builds, and
//! `rigdeck engines build --source-release V` fetches that release from a local package index
//! (the test double standing in for PyPI), verifies it against the sha256 the index states,
//! unpacks it and hands it to CMake (whose configure step this tree stops at). Releases the index
//! lacks, lists without a hash or serves damaged are refused before anything is built, on the CLI
//! and through `POST /api/v1/engines/build`.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use rigdeck_core::engines::source::{self, BUNDLED_LLAMA_CPP};

const GOOD: &str = "0.3.99";
const UNHASHED: &str = "0.3.98";
const DAMAGED: &str = "0.3.97";

/// `llama_cpp_python-VERSION.tar.gz` holding a llama.cpp tree whose CMake configure step fails
/// with "stop here" (so nothing long is compiled); its sha256.
fn write_sdist(project: &Path, version: &str) -> String {
    let top = format!("llama_cpp_python-{version}");
    let staging = project.join(format!(".staging-{version}"));
    support::tree_that_stops_at_configure(&staging.join(&top).join("vendor/llama.cpp"));
    let archive = project.join(format!("{top}.tar.gz"));
    let status = Command::new("tar")
        .arg("-C")
        .arg(&staging)
        .arg("-czf")
        .arg(&archive)
        .arg(&top)
        .status()
        .expect("tar");
    assert!(status.success());
    std::fs::remove_dir_all(&staging).unwrap();
    source::sha256_file(&archive).unwrap()
}

/// Lays out `root/simple/llama-cpp-python/`: the pinned release (listed, never fetched here), a
/// newer one with its hash, one listed without a hash, and one whose listed hash is not the
/// file's.
fn write_index(root: &Path) {
    let project = root.join("simple/llama-cpp-python");
    std::fs::create_dir_all(&project).unwrap();
    let good = write_sdist(&project, GOOD);
    write_sdist(&project, UNHASHED);
    write_sdist(&project, DAMAGED);
    let link = |version: &str, hash: Option<&str>| {
        let file = format!("llama_cpp_python-{version}.tar.gz");
        let fragment = hash.map(|h| format!("#sha256={h}")).unwrap_or_default();
        format!("<a href=\"{file}{fragment}\">{file}</a>\n")
    };
    let page = [
        link(GOOD, Some(&good)),
        link(UNHASHED, None),
        link(DAMAGED, Some(&"0".repeat(64))),
        link(&BUNDLED_LLAMA_CPP.version, Some(&BUNDLED_LLAMA_CPP.sha256)),
    ]
    .concat();
    std::fs::write(
        project.join("index.html"),
        format!("<!DOCTYPE html><html><body>{page}</body></html>\n"),
    )
    .unwrap();
}

/// Writes the index under `dir/index` and serves it on loopback.
async fn serve_index(dir: &Path) -> String {
    let index = dir.join("index");
    write_index(&index);
    support::serve_index_folder(&index).await
}

/// `rigdeck engines ARGS` in `dir`, off the runtime that serves the index.
async fn engines(dir: &Path, args: &[&str]) -> Output {
    let (dir, args): (_, Vec<String>) =
        (dir.to_owned(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        support::rigdeck_in(&dir)
            .arg("engines")
            .args(&args)
            .env_remove("CUDACXX")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_source_release_is_listed_then_fetched_verified_and_handed_to_cmake() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve_index(dir.path()).await;

    let output = engines(dir.path(), &["versions", "llama.cpp", "--index-url", &url]).await;
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stderr}");
    let newer = |v: &str| {
        format!("{v}  (newer: `rigdeck engines build --kind llama.cpp --source-release {v}`)")
    };
    let expected = [
        newer(GOOD),
        newer(UNHASHED),
        newer(DAMAGED),
        format!("{}  (bundled)", BUNDLED_LLAMA_CPP.version),
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected, "{stdout}");

    let output = engines(
        dir.path(),
        &[
            "build",
            "--backend",
            "cpu",
            "--source-release",
            GOOD,
            "--index-url",
            &url,
        ],
    )
    .await;
    let (stdout, stderr) = support::output_text(&output);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("from the source in llama-cpp-python {GOOD}")),
        "{stdout}"
    );
    // Verified, unpacked and configured: CMake ran on the release's own tree.
    assert!(stderr.contains("stop here"), "{stderr}");
    let tree = dir
        .path()
        .join(format!("cache/sources/llama-cpp-python-{GOOD}/llama.cpp"));
    assert!(tree.join("CMakeLists.txt").is_file(), "{}", tree.display());
    assert!(
        stdout.contains(&format!("llama.cpp-py{GOOD}-cpu")),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_that_cannot_be_verified_are_refused_before_anything_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve_index(dir.path()).await;
    let cases: [(&[&str], &str); 5] = [
        (
            &["--source-release", "0.4.0"],
            "llama-cpp-python 0.4.0 is not on the package index",
        ),
        (
            &["--source-release", UNHASHED],
            "states no sha256 for llama_cpp_python-0.3.98.tar.gz",
        ),
        (&["--source-release", DAMAGED], "expected 0000000000"),
        (
            &["--source-release", "latest"],
            "'latest' is not a release number",
        ),
        (
            &["--kind", "vllm", "--source-release", "1.0"],
            "vllm is not built from source",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["build", "--backend", "cpu", "--index-url", &url];
        args.extend_from_slice(extra);
        let output = engines(dir.path(), &args).await;
        let (stdout, stderr) = support::output_text(&output);
        assert!(!output.status.success(), "{extra:?}: {stdout}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(
            !stderr.contains("stop here"),
            "{extra:?} reached CMake: {stderr}"
        );
    }
    // The newest releases are named for the one the index lacks.
    let output = engines(
        dir.path(),
        &["build", "--source-release", "0.4.0", "--index-url", &url],
    )
    .await;
    let (_, stderr) = support::output_text(&output);
    assert!(
        stderr.contains("its newest releases: 0.3.99, 0.3.98, 0.3.97, 0.3.36"),
        "{stderr}"
    );
    // Nothing damaged was kept, nothing was built.
    let sources = dir.path().join("cache/sources");
    let kept: Vec<_> = std::fs::read_dir(&sources)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
    assert!(!dir.path().join("data/engines").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_lists_newer_sources_and_refuses_a_release_the_index_lacks() {
    let t = support::TestServer::start("4x3090.json").await;
    let url = serve_index(t.dir.path()).await;

    let versions = t
        .get_json(&format!(
            "/api/v1/engines/versions?kind=llama.cpp&index_url={url}"
        ))
        .await;
    assert_eq!(versions["package"], "llama-cpp-python", "{versions}");
    assert_eq!(versions["pinned"], &*BUNDLED_LLAMA_CPP.version);
    assert_eq!(versions["default"], &*BUNDLED_LLAMA_CPP.version);
    assert_eq!(
        versions["newer"],
        serde_json::json!([GOOD, UNHASHED, DAMAGED]),
        "{versions}"
    );
    assert_eq!(versions["installed"], serde_json::json!([]));

    for (release, code, says) in [
        ("0.4.0", "bad_release", "0.4.0 is not on the package index"),
        (UNHASHED, "bad_release", "states no sha256"),
        ("1.0; rm -rf /", "bad_release", "is not a release number"),
    ] {
        let body = serde_json::json!({"kind": "llama.cpp", "release": release, "index_url": url});
        let (status, error) = t.post_json("/api/v1/engines/build", &body).await;
        assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{error}");
        assert_eq!(error["code"], code, "{error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{error}");
    }
    let body = serde_json::json!({"kind": "vllm", "release": "1.0"});
    let (status, error) = t.post_json("/api/v1/engines/build", &body).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
    assert_eq!(error["code"], "bad_kind", "{error}");
}
