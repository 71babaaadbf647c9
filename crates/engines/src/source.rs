//! The llama.cpp and ik_llama.cpp sources that Rigdeck builds: by default the tree vendored in a
//! pinned source distribution on the Python package index (`llama-cpp-python` for llama.cpp,
//! `ik-llama-cpp-python` for ik_llama.cpp), else a user's archive (tar.gz of either tree) or
//! folder.
//!
//! The pinned archive is downloaded over HTTP(S) from the package index (PyPI, or the mirror pip
//! is set up for; see [`package_index`]), hashed while it streams to disk and, only once its
//! sha256 matches the pin, unpacked into a cache outside any checkout
//! (`$RIGDECK_CACHE_DIR/sources`, default `~/.cache/rigdeck/sources`). Nothing from the archive
//! runs: no pip, no build backend. When the verified tree is already there, nothing is
//! downloaded, hashed or unpacked again. Archive entries are sanitized: no absolute path, no `..`,
//! no link leads outside the destination.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::package_index::{self, IndexError, Timeouts};
use super::progress::BuildStep;
use super::EngineKind;

/// Moves the cache (sources, and the test builds) elsewhere; default `~/.cache/rigdeck`.
pub const CACHE_DIR_ENV: &str = "RIGDECK_CACHE_DIR";

/// A source archive pinned by version and sha256. The bundled pins are written into Rigdeck; a
/// newer release of the same package is pinned when it is asked for, to the sha256 the index
/// states for it ([`index_release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedSource {
    /// The package on the Python package index.
    pub package: Cow<'static, str>,
    pub version: Cow<'static, str>,
    /// The file's name on the package index.
    pub file_name: Cow<'static, str>,
    pub sha256: Cow<'static, str>,
    pub size_bytes: u64,
    /// The engine's tree inside the archive.
    pub tree_prefix: Cow<'static, str>,
    /// Names the build folder and the build's version: the vendored commit when the sdist says
    /// which, else the sdist's own version.
    pub label: Cow<'static, str>,
    /// The commit the tree was vendored from, when known. The sdist has no usable `.git`, so
    /// CMake cannot find it by itself; Rigdeck passes it on so `--version` names it.
    pub commit: Option<Cow<'static, str>>,
}

/// llama.cpp as vendored in `llama-cpp-python` 0.3.36 (commit 0c1e570, October 2026).
pub static BUNDLED_LLAMA_CPP: PinnedSource = PinnedSource {
    package: Cow::Borrowed("llama-cpp-python"),
    version: Cow::Borrowed("0.3.36"),
    file_name: Cow::Borrowed("llama_cpp_python-0.3.36.tar.gz"),
    sha256: Cow::Borrowed("832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"),
    size_bytes: 76_589_250,
    tree_prefix: Cow::Borrowed("llama_cpp_python-0.3.36/vendor/llama.cpp"),
    label: Cow::Borrowed("0c1e570"),
    commit: Some(Cow::Borrowed("0c1e570")),
};

/// ik_llama.cpp as vendored in `ik-llama-cpp-python` 0.1.5 (its `examples/server` and
/// `llama-bench`). The sdist does not name the commit, so builds carry the sdist's version.
pub static BUNDLED_IK_LLAMA_CPP: PinnedSource = PinnedSource {
    package: Cow::Borrowed("ik-llama-cpp-python"),
    version: Cow::Borrowed("0.1.5"),
    file_name: Cow::Borrowed("ik_llama_cpp_python-0.1.5.tar.gz"),
    sha256: Cow::Borrowed("33c67eb99e4dcab5e611050433243815709b8b3067753f9ce18375013cf002ad"),
    size_bytes: 42_257_843,
    tree_prefix: Cow::Borrowed("ik_llama_cpp_python-0.1.5/vendor/ik_llama.cpp"),
    label: Cow::Borrowed("py0.1.5"),
    commit: None,
};

/// The pinned source Rigdeck builds `kind` from; `None` for the Python engines.
pub fn pinned_source(kind: EngineKind) -> Option<&'static PinnedSource> {
    match kind {
        EngineKind::LlamaCpp => Some(&BUNDLED_LLAMA_CPP),
        EngineKind::IkLlamaCpp => Some(&BUNDLED_IK_LLAMA_CPP),
        EngineKind::Vllm | EngineKind::Sglang => None,
    }
}

impl PinnedSource {
    /// `llama-cpp-python==0.3.36`, as pip writes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }

    /// The folder under `sources` that holds the unpacked tree and its marker.
    fn unpack_root(&self, sources: &Path) -> PathBuf {
        sources.join(format!("{}-{}", self.package, self.version))
    }

    /// Where the unpacked llama.cpp tree lives under a sources folder.
    pub fn tree_dir(&self, sources: &Path) -> PathBuf {
        self.unpack_root(sources).join("llama.cpp")
    }

    /// Release `version` of this pin's package in the same layout (the file name and the tree's
    /// place in the archive with the other version), labelled `py<version>` since the sdist does
    /// not name the engine's commit. Its sha256 is the index's to state ([`index_release`]); the
    /// size stays this pin's, as the estimate for progress and the download's byte budget.
    fn other_release(&self, version: &str) -> PinnedSource {
        let swap = |text: &str| text.replacen(&*self.version, version, 1);
        PinnedSource {
            package: self.package.clone(),
            version: Cow::Owned(version.to_owned()),
            file_name: Cow::Owned(swap(&self.file_name)),
            sha256: Cow::Borrowed(""),
            size_bytes: self.size_bytes,
            tree_prefix: Cow::Owned(swap(&self.tree_prefix)),
            label: Cow::Owned(format!("py{version}")),
            commit: None,
        }
    }

    /// The source release a build of this kind came from, read back from the build's version:
    /// this pin's version for its label, or for a registered binary whose `--version` names the
    /// pin's commit (`0.5.0-dev (0c1e570)`); `0.3.40` for `py0.3.40`; else `None` (a build from
    /// a user's folder or archive).
    pub fn release_of_build(&self, build_version: &str) -> Option<String> {
        let names_commit = self
            .commit
            .as_deref()
            .is_some_and(|commit| build_version.contains(&format!("({commit})")));
        if build_version == self.label || names_commit {
            return Some(self.version.to_string());
        }
        build_version
            .strip_prefix("py")
            .filter(|v| package_index::release_numbers(v).is_some())
            .map(str::to_owned)
    }
}

/// What `rigdeck engines build` and `POST /engines/build` build from without a `--source`: the
/// bundled pin of `kind`, or `release` of its package pinned to what the index states
/// ([`index_release`]), looked up before anything is downloaded. `NoSourcePackage` for vLLM and
/// SGLang.
pub async fn pinned_or_release(
    kind: EngineKind,
    release: Option<&str>,
    index_url: Option<String>,
) -> Result<SourceSpec, SourceError> {
    let pin = match release {
        None => pinned_source(kind)
            .ok_or(SourceError::NoSourcePackage { kind })?
            .clone(),
        Some(version) => {
            let options = FetchOptions {
                index_url: index_url.clone(),
                ..FetchOptions::default()
            };
            index_release(kind, version, &options).await?
        }
    };
    Ok(SourceSpec::Pinned { pin, index_url })
}

/// Release `version` of `kind`'s source package from the package index (a llama.cpp newer than
/// the bundled one, say), pinned to the sha256 the index states for it; the bundled pin itself
/// when `version` is its version. Refused, before anything is downloaded, when `version` is not a
/// release number, when the index does not list it, or when the index states no hash for it.
pub async fn index_release(
    kind: EngineKind,
    version: &str,
    options: &FetchOptions,
) -> Result<PinnedSource, SourceError> {
    let pin = pinned_source(kind).ok_or(SourceError::NoSourcePackage { kind })?;
    if version == pin.version {
        return Ok(pin.clone());
    }
    if package_index::release_numbers(version).is_none() {
        return Err(SourceError::BadRelease {
            kind,
            version: version.to_owned(),
        });
    }
    let mut release = pin.other_release(version);
    let index = package_index::resolve_index_url(options.index_url.as_deref()).await;
    let shown_index = package_index::without_credentials(&index);
    let fetch_err = |source: IndexError| SourceError::Fetch {
        file: release.file_name.to_string(),
        index: shown_index.clone(),
        sha256: "as the index lists it".to_owned(),
        source: Box::new(source),
    };
    let index_url = package_index::parse_index_url(&index).map_err(fetch_err)?;
    let client = package_index::client(&options.timeouts).map_err(fetch_err)?;
    let found = package_index::find_file(
        &client,
        &index_url,
        &pin.package,
        &release.file_name,
        &options.timeouts,
    )
    .await;
    let listed = match found {
        Ok(listed) => listed,
        Err(IndexError::NoFile { .. }) => {
            let listed = package_index::project_versions(
                &client,
                &index_url,
                &pin.package,
                &options.timeouts,
            )
            .await
            .unwrap_or_default();
            return Err(SourceError::ReleaseNotListed {
                kind,
                package: pin.package.to_string(),
                version: version.to_owned(),
                index: shown_index,
                newest: package_index::newest_releases_text(&listed),
            });
        }
        Err(err) => return Err(fetch_err(err)),
    };
    let sha256 = listed.sha256.ok_or_else(|| SourceError::ReleaseUnhashed {
        file: release.file_name.to_string(),
        index: shown_index.clone(),
    })?;
    release.sha256 = Cow::Owned(sha256);
    Ok(release)
}

/// What to build from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// A pinned tree ([`pinned_source`]), from this package index (pip's `--index-url`: a
    /// mirror) or, when `None`, the one [`package_index::resolve_index_url`] picks.
    Pinned {
        pin: PinnedSource,
        index_url: Option<String>,
    },
    /// A tar.gz holding a llama.cpp or ik_llama.cpp tree (at its top or one or two folders down);
    /// checked against `sha256` when given.
    Archive {
        path: PathBuf,
        sha256: Option<String>,
    },
    /// A source folder already on disk (a git checkout, an unpacked release).
    Folder(PathBuf),
}

impl SourceSpec {
    /// The pinned tree of `kind`, from `index_url` when given; `None` for the Python engines.
    pub fn pinned(kind: EngineKind, index_url: Option<String>) -> Option<Self> {
        Some(SourceSpec::Pinned {
            pin: pinned_source(kind)?.clone(),
            index_url,
        })
    }

    /// The pinned source this builds from, if it is one.
    pub fn pin(&self) -> Option<&PinnedSource> {
        match self {
            SourceSpec::Pinned { pin, .. } => Some(pin),
            _ => None,
        }
    }

    /// A user's `--source PATH`: a file is an archive, a folder a tree.
    pub fn from_path(path: PathBuf, sha256: Option<String>) -> Result<Self, SourceError> {
        let meta = fs::metadata(&path).map_err(|_| SourceError::NotFound { path: path.clone() })?;
        if meta.is_dir() {
            Ok(SourceSpec::Folder(path))
        } else {
            Ok(SourceSpec::Archive { path, sha256 })
        }
    }
}

/// A source tree ready for CMake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreparedSource {
    /// The folder with the top-level `CMakeLists.txt`.
    pub tree: PathBuf,
    /// Names the build folder: the commit of the pinned source, `src-<hash>` for an archive,
    /// `local-<hash of the path>` for a folder.
    pub label: String,
    /// The archive's sha256; `None` for a folder (its content changes under us; Ninja decides
    /// what to rebuild).
    pub sha256: Option<String>,
    /// The engine's commit when known from the pin.
    pub commit: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot find a cache folder: set HOME or {CACHE_DIR_ENV}")]
    NoCacheDir,
    #[error("no {what} under {}: run `make test` (it builds the bundled llama.cpp) or set {env}", .under.display())]
    NotCached {
        what: &'static str,
        under: PathBuf,
        env: &'static str,
    },
    #[error("source archive '{path}' has sha256 {actual}, expected {expected}: {fix}")]
    HashMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
        fix: String,
    },
    #[error(
        "cannot fetch {file} from the package index {index}: {source}. Check the network \
         connection, point --index-url (or PIP_INDEX_URL) at a reachable index, or download \
         {file} (sha256 {sha256}) yourself and pass --source PATH --source-sha256 {sha256}"
    )]
    Fetch {
        file: String,
        index: String,
        sha256: String,
        // Boxed: a URL or two would make every build error that much larger.
        source: Box<IndexError>,
    },
    #[error(
        "the package index {index} lists {file} with sha256 {listed}, but the pinned file has \
         {pinned}: not downloading it. The index (or a proxy in front of it) has another file \
         under that name; use another index with --index-url, or download the release \
         yourself and pass --source PATH --source-sha256 {pinned}"
    )]
    IndexDisagrees {
        index: String,
        file: String,
        listed: String,
        pinned: String,
    },
    #[error("source archive '{path}' cannot be unpacked: {reason}")]
    BadArchive { path: PathBuf, reason: String },
    #[error("source archive '{path}' holds an unsafe entry '{entry}' (absolute, or leading outside the tree): refusing to unpack it")]
    UnsafeEntry { path: PathBuf, entry: String },
    #[error("source '{path}' does not exist: give an existing folder or .tar.gz archive")]
    NotFound { path: PathBuf },
    #[error("'{path}' holds no llama.cpp source tree (a folder with CMakeLists.txt and include/llama.h): point --source at the llama.cpp or ik_llama.cpp checkout")]
    NotASourceTree { path: PathBuf },
    #[error("cannot {action} '{path}': {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{kind} is not built from source: install it with `rigdeck engines install {kind}`, or register an existing Python environment with `rigdeck engines register PATH --kind {kind}`")]
    NoSourcePackage { kind: EngineKind },
    #[error("'{version}' is not a release number: give one like 0.3.40 (`rigdeck engines versions {kind}` lists them)")]
    BadRelease { kind: EngineKind, version: String },
    #[error("{package} {version} is not on the package index {index} (its newest releases: {newest}): pick one of those (`rigdeck engines versions {kind}`)")]
    ReleaseNotListed {
        kind: EngineKind,
        package: String,
        version: String,
        index: String,
        newest: String,
    },
    #[error("the package index {index} states no sha256 for {file}, so it cannot be verified: use an index that lists hashes (PyPI does), or download it yourself and pass --source PATH --source-sha256 HEX")]
    ReleaseUnhashed { file: String, index: String },
    #[error("the {0} task stopped unexpectedly")]
    Interrupted(&'static str),
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SourceError + 'a {
    move |source| SourceError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Rigdeck's cache root: `$RIGDECK_CACHE_DIR`, else `~/.cache/rigdeck` (XDG cache home).
pub fn cache_root() -> Result<PathBuf, SourceError> {
    if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    dirs::cache_dir()
        .map(|d| d.join("rigdeck"))
        .ok_or(SourceError::NoCacheDir)
}

/// The `bin` folder of the llama.cpp build the tests share with the packages
/// ([`crate::cmake_build::shared_cpu_build_dir`] under [`cache_root`]; `RIGDECK_LLAMA_BIN_DIR`
/// names another): the `llama-server` and `llama-fit-params` tests and benchmarks run.
pub fn cached_llama_cpp_bin() -> Result<PathBuf, SourceError> {
    const ENV: &str = "RIGDECK_LLAMA_BIN_DIR";
    if let Some(dir) = std::env::var_os(ENV) {
        return Ok(PathBuf::from(dir));
    }
    let build = crate::cmake_build::shared_cpu_build_dir(&cache_root()?);
    let bin = build.join("bin");
    if bin.exists() {
        return Ok(bin);
    }
    Err(SourceError::NotCached {
        what: "llama.cpp build",
        under: build,
        env: ENV,
    })
}

/// The cached llama.cpp source tree (`RIGDECK_LLAMA_SOURCE_DIR` names another): its
/// `models/ggml-vocab-*.gguf` are the real tokenizers test models are written with.
pub fn cached_llama_cpp_source() -> Result<PathBuf, SourceError> {
    cached_or_env(
        "llama.cpp source tree",
        "RIGDECK_LLAMA_SOURCE_DIR",
        &sources_dir(&cache_root()?),
        "llama-cpp-python-",
        "llama.cpp",
    )
}

/// `<entry>/<suffix>` for the first entry of `under` (a cache folder) whose name starts with
/// `prefix` (so ik_llama.cpp's entries are not taken for llama.cpp's) and that has it, unless
/// the environment variable `env` names the folder itself.
fn cached_or_env(
    what: &'static str,
    env: &'static str,
    under: &Path,
    prefix: &str,
    suffix: &str,
) -> Result<PathBuf, SourceError> {
    if let Some(dir) = std::env::var_os(env) {
        return Ok(PathBuf::from(dir));
    }
    std::fs::read_dir(under)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path().join(suffix))
        .find(|p| p.exists())
        .ok_or_else(|| SourceError::NotCached {
            what,
            under: under.to_owned(),
            env,
        })
}

/// Where archives and unpacked trees live under the cache root.
pub fn sources_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("sources")
}

/// The tree of the pinned source when it is already unpacked and verified (nothing to do).
pub fn cached_tree(pin: &PinnedSource, sources: &Path) -> Option<PathBuf> {
    let tree = pin.tree_dir(sources);
    (marker_matches(&pin.unpack_root(sources), &pin.sha256)
        && tree.join("CMakeLists.txt").is_file())
    .then_some(tree)
}

/// Makes `spec` ready for CMake, downloading, verifying and unpacking only what the cache lacks.
/// `report` hears each step (fetch, verify, extract) with a line of text.
pub async fn prepare(
    spec: &SourceSpec,
    cache_root: &Path,
    report: &(dyn Fn(BuildStep, &str) + Send + Sync),
) -> Result<PreparedSource, SourceError> {
    let sources = sources_dir(cache_root);
    match spec {
        SourceSpec::Pinned { pin, index_url } => {
            let options = FetchOptions {
                index_url: index_url.clone(),
                ..FetchOptions::default()
            };
            prepare_pinned(pin, cache_root, &options, report).await
        }
        SourceSpec::Archive { path, sha256 } => {
            if !path.is_file() {
                return Err(SourceError::NotFound { path: path.clone() });
            }
            report(
                BuildStep::Verify,
                &format!("computing the sha256 of {}", path.display()),
            );
            let actual = sha256_file_async(path).await?;
            if let Some(expected) = sha256 {
                if !expected.trim().eq_ignore_ascii_case(&actual) {
                    return Err(SourceError::HashMismatch {
                        path: path.clone(),
                        expected: expected.trim().to_ascii_lowercase(),
                        actual,
                        fix: "the file is damaged or not the release you meant; download it again, or check the sha256 you gave".into(),
                    });
                }
            }
            let root = sources.join(format!("archive-{}", &actual[..16]));
            if !marker_matches(&root, &actual) {
                report(
                    BuildStep::Extract,
                    &format!("unpacking {} into {}", path.display(), root.display()),
                );
                let (archive, root_owned, hash) = (path.clone(), root.clone(), actual.clone());
                tokio::task::spawn_blocking(move || {
                    unpack_into(&archive, &root_owned, "tree", None, &hash)
                })
                .await
                .map_err(|_| SourceError::Interrupted("unpack"))??;
            } else {
                report(
                    BuildStep::Extract,
                    &format!("using the unpacked copy in {}", root.display()),
                );
            }
            let tree = find_source_tree(&root.join("tree"))
                .ok_or_else(|| SourceError::NotASourceTree { path: path.clone() })?;
            Ok(PreparedSource {
                tree,
                label: format!("src-{}", &actual[..12]),
                sha256: Some(actual),
                commit: None,
            })
        }
        SourceSpec::Folder(path) => {
            let folder =
                fs::canonicalize(path).map_err(|_| SourceError::NotFound { path: path.clone() })?;
            let tree = find_source_tree(&folder)
                .ok_or_else(|| SourceError::NotASourceTree { path: path.clone() })?;
            report(
                BuildStep::Extract,
                &format!("building from the folder {}", tree.display()),
            );
            let path_hash = package_index::hex(&Sha256::digest(tree.to_string_lossy().as_bytes()));
            Ok(PreparedSource {
                tree,
                label: format!("local-{}", &path_hash[..8]),
                sha256: None,
                commit: None,
            })
        }
    }
}

/// Where a pinned archive comes from and how long the network may take.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    /// The package index (pip's `--index-url`); `None`: the one
    /// [`package_index::resolve_index_url`] picks (pip's own setting, else PyPI).
    pub index_url: Option<String>,
    pub timeouts: Timeouts,
}

/// The tree of `pin`, ready for CMake: the cached one, else the archive (cached, or downloaded
/// from the package index) verified against the pin and only then unpacked.
pub async fn prepare_pinned(
    pin: &PinnedSource,
    cache_root: &Path,
    options: &FetchOptions,
    report: &(dyn Fn(BuildStep, &str) + Send + Sync),
) -> Result<PreparedSource, SourceError> {
    let sources = sources_dir(cache_root);
    let tree = match cached_tree(pin, &sources) {
        Some(tree) => {
            report(
                BuildStep::Extract,
                &format!("using the cached source in {}", tree.display()),
            );
            tree
        }
        None => {
            let archive = fetch_pinned(pin, &sources, options, report).await?;
            report(
                BuildStep::Extract,
                &format!("unpacking {} from {}", pin.tree_prefix, archive.display()),
            );
            let (sources, pin) = (sources.clone(), pin.clone());
            tokio::task::spawn_blocking(move || unpack_pinned(&archive, &pin, &sources))
                .await
                .map_err(|_| SourceError::Interrupted("unpack"))??
        }
    };
    Ok(PreparedSource {
        tree,
        label: pin.label.to_string(),
        sha256: Some(pin.sha256.to_string()),
        commit: pin.commit.as_deref().map(str::to_owned),
    })
}

/// The pinned archive in the sources folder: the cached copy once re-verified, else a fresh
/// download that takes the final name only when its sha256 matches the pin.
async fn fetch_pinned(
    pin: &PinnedSource,
    sources: &Path,
    options: &FetchOptions,
    report: &(dyn Fn(BuildStep, &str) + Send + Sync),
) -> Result<PathBuf, SourceError> {
    let archive = sources.join(&*pin.file_name);
    if archive.is_file() {
        report(
            BuildStep::Verify,
            &format!("checking the sha256 of {}", archive.display()),
        );
        verify_sha256_async(&archive, &pin.sha256, CACHED_ARCHIVE_FIX).await?;
        return Ok(archive);
    }
    fs::create_dir_all(sources).map_err(io_err("create the folder", sources))?;
    let index = package_index::resolve_index_url(options.index_url.as_deref()).await;
    // What messages and progress lines show: a password in a mirror's URL stays out of them.
    let shown_index = package_index::without_credentials(&index);
    let fetch_err = |source: IndexError| SourceError::Fetch {
        file: pin.file_name.to_string(),
        index: shown_index.clone(),
        sha256: pin.sha256.to_string(),
        source: Box::new(source),
    };
    let index_url = package_index::parse_index_url(&index).map_err(fetch_err)?;
    let client = package_index::client(&options.timeouts).map_err(fetch_err)?;
    report(
        BuildStep::Fetch,
        &format!(
            "looking up {} on the package index {shown_index}",
            pin.file_name
        ),
    );
    let listed = package_index::find_file(
        &client,
        &index_url,
        &pin.package,
        &pin.file_name,
        &options.timeouts,
    )
    .await
    .map_err(fetch_err)?;
    if let Some(listed_sha256) = listed
        .sha256
        .filter(|h| !h.eq_ignore_ascii_case(&pin.sha256))
    {
        return Err(SourceError::IndexDisagrees {
            index: shown_index,
            file: pin.file_name.to_string(),
            listed: listed_sha256,
            pinned: pin.sha256.to_string(),
        });
    }
    // Next to the cache, not in it: only a verified file takes the final name.
    let partial = PartialDownload(sources.join(format!(
        ".{}.download-{}",
        pin.file_name,
        std::process::id()
    )));
    report(
        BuildStep::Fetch,
        &format!(
            "downloading {} ({} MB)",
            listed.url,
            pin.size_bytes / 1_000_000
        ),
    );
    let downloaded = package_index::download(
        &client,
        &listed.url,
        &partial.0,
        // The pinned file has exactly `size_bytes`: twice that is room enough for an honest
        // answer, and where an endless one is cut off.
        pin.size_bytes.saturating_mul(2),
        pin.size_bytes,
        &options.timeouts,
        &|line| report(BuildStep::Fetch, line),
    )
    .await
    .map_err(fetch_err)?;
    report(
        BuildStep::Verify,
        &format!(
            "checking the sha256 of the {} bytes received",
            downloaded.bytes
        ),
    );
    if !downloaded.sha256.eq_ignore_ascii_case(&pin.sha256) {
        return Err(SourceError::HashMismatch {
            path: PathBuf::from(listed.url.as_str()),
            expected: pin.sha256.to_string(),
            actual: downloaded.sha256,
            fix: FRESH_DOWNLOAD_FIX.to_owned(),
        });
    }
    fs::rename(&partial.0, &archive).map_err(io_err("move the download to", &archive))?;
    Ok(archive)
}

/// A download under way: removed on every path that does not move it into place, an error or a
/// cancelled build alike.
struct PartialDownload(PathBuf);

impl Drop for PartialDownload {
    fn drop(&mut self) {
        // After the rename there is nothing left to remove.
        let _ = fs::remove_file(&self.0);
    }
}

const CACHED_ARCHIVE_FIX: &str =
    "the cached file is damaged or not the pinned release; delete it to download it again";
const FRESH_DOWNLOAD_FIX: &str =
    "the package index served a different file than the pinned one (it was not kept); try again, \
     and if it happens again check for a proxy that rewrites downloads";

/// The sha256 of a file as lower-case hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(package_index::hex(&hasher.finalize()))
}

/// Checks that `path` has the sha256 `expected`; the error names the file, both hashes and the fix.
pub fn verify_sha256(path: &Path, expected: &str, fix: &str) -> Result<(), SourceError> {
    let actual = sha256_file(path).map_err(io_err("read", path))?;
    if actual.eq_ignore_ascii_case(expected.trim()) {
        Ok(())
    } else {
        Err(SourceError::HashMismatch {
            path: path.to_owned(),
            expected: expected.trim().to_ascii_lowercase(),
            actual,
            fix: fix.to_owned(),
        })
    }
}

/// [`verify_sha256`] for a cached copy of the pinned archive, with its fix: delete and re-download.
pub fn verify_pinned_archive(path: &Path, pin: &PinnedSource) -> Result<(), SourceError> {
    verify_sha256(path, &pin.sha256, CACHED_ARCHIVE_FIX)
}

async fn verify_sha256_async(path: &Path, expected: &str, fix: &str) -> Result<(), SourceError> {
    let (path, expected, fix) = (path.to_owned(), expected.to_owned(), fix.to_owned());
    tokio::task::spawn_blocking(move || verify_sha256(&path, &expected, &fix))
        .await
        .map_err(|_| SourceError::Interrupted("sha256"))?
}

async fn sha256_file_async(path: &Path) -> Result<String, SourceError> {
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || sha256_file(&owned))
        .await
        .map_err(|_| SourceError::Interrupted("sha256"))?
        .map_err(io_err("read", path))
}

/// Written next to an unpacked tree once it is complete: which archive it came from.
#[derive(Debug, Serialize, Deserialize)]
struct UnpackMarker {
    sha256: String,
}

const MARKER_FILE: &str = "rigdeck-source.json";

fn marker_matches(root: &Path, sha256: &str) -> bool {
    fs::read(root.join(MARKER_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<UnpackMarker>(&bytes).ok())
        .is_some_and(|m| m.sha256.eq_ignore_ascii_case(sha256))
}

fn unpack_pinned(
    archive: &Path,
    pin: &PinnedSource,
    sources: &Path,
) -> Result<PathBuf, SourceError> {
    let root = pin.unpack_root(sources);
    unpack_into(
        archive,
        &root,
        "llama.cpp",
        Some(Path::new(&*pin.tree_prefix)),
        &pin.sha256,
    )?;
    Ok(pin.tree_dir(sources))
}

/// Unpacks `archive` (only what lies under `prefix`, when given) into `<root>/<sub>`, writing the
/// marker last. Works in a side folder renamed into place, so an interrupted unpack is never
/// mistaken for a complete one.
fn unpack_into(
    archive: &Path,
    root: &Path,
    sub: &str,
    prefix: Option<&Path>,
    sha256: &str,
) -> Result<(), SourceError> {
    let parent = root.parent().unwrap_or(Path::new("."));
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tree".to_owned());
    let partial = parent.join(format!(".{name}.partial-{}", std::process::id()));
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(io_err("clear the folder", &partial))?;
    }
    let dest = partial.join(sub);
    fs::create_dir_all(&dest).map_err(io_err("create the folder", &dest))?;
    let unpacked = extract_tar_gz(archive, &dest, prefix);
    let files = match unpacked {
        Ok(files) => files,
        Err(err) => {
            let _ = fs::remove_dir_all(&partial);
            return Err(err);
        }
    };
    if files == 0 {
        let _ = fs::remove_dir_all(&partial);
        return Err(SourceError::BadArchive {
            path: archive.to_owned(),
            reason: match prefix {
                Some(p) => format!("it holds no files under {}", p.display()),
                None => "it holds no files".to_owned(),
            },
        });
    }
    let marker = serde_json::to_vec(&UnpackMarker {
        sha256: sha256.to_ascii_lowercase(),
    })
    .unwrap_or_default();
    let marker_path = partial.join(MARKER_FILE);
    fs::write(&marker_path, marker).map_err(io_err("write", &marker_path))?;
    if root.exists() {
        fs::remove_dir_all(root).map_err(io_err("replace the folder", root))?;
    }
    fs::rename(&partial, root).map_err(io_err("move the unpacked tree to", root))?;
    Ok(())
}

/// An archive path that would land outside the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsafePath;

/// Where an archive entry may be written, relative to the destination. `Ok(None)` for entries
/// outside `prefix` (not wanted) and for the prefix folder itself; an error for absolute paths
/// and any `..`.
pub fn sanitize_entry_path(
    raw: &Path,
    prefix: Option<&Path>,
) -> Result<Option<PathBuf>, UnsafePath> {
    let mut clean = PathBuf::new();
    for component in raw.components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(UnsafePath)
            }
        }
    }
    let relative = match prefix {
        Some(prefix) => match clean.strip_prefix(prefix) {
            Ok(rest) => rest.to_owned(),
            Err(_) => return Ok(None),
        },
        None => clean,
    };
    Ok((!relative.as_os_str().is_empty()).then_some(relative))
}

/// Whether a symlink at `entry` (relative to the destination) pointing at `target` stays inside
/// the destination, judged by its text: relative, and never climbing above the top.
pub fn link_stays_inside(entry: &Path, target: &Path) -> bool {
    let mut depth: usize = entry.parent().map_or(0, |p| p.components().count());
    for component in target.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Unpacks a tar.gz into `dest` (which exists), keeping only entries under `prefix` (stripped)
/// when given. Regular files, folders and links that stay inside are written; devices and the
/// like are skipped. Returns the number of files written.
pub fn extract_tar_gz(
    archive: &Path,
    dest: &Path,
    prefix: Option<&Path>,
) -> Result<usize, SourceError> {
    let file = File::open(archive).map_err(io_err("open", archive))?;
    let bad = |reason: io::Error| SourceError::BadArchive {
        path: archive.to_owned(),
        reason: reason.to_string(),
    };
    let unsafe_entry = |entry: &Path| SourceError::UnsafeEntry {
        path: archive.to_owned(),
        entry: entry.display().to_string(),
    };
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(io::BufReader::new(file)));
    // Links we created: nothing may be written through one, or a pair of harmless-looking links
    // could still point outside.
    let mut links: HashSet<PathBuf> = HashSet::new();
    let mut files = 0usize;
    for entry in tar.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let raw = entry.path().map_err(bad)?.into_owned();
        let Some(relative) = sanitize_entry_path(&raw, prefix).map_err(|_| unsafe_entry(&raw))?
        else {
            continue;
        };
        if relative.ancestors().skip(1).any(|a| links.contains(a)) {
            return Err(unsafe_entry(&raw));
        }
        let target = dest.join(&relative);
        let entry_type = entry.header().entry_type();
        if entry_type.is_dir() {
            fs::create_dir_all(&target).map_err(io_err("create the folder", &target))?;
            continue;
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(io_err("create the folder", parent))?;
        }
        // Replace whatever an earlier entry left at this name, never write through it.
        match fs::symlink_metadata(&target) {
            Ok(meta) if meta.is_dir() => return Err(unsafe_entry(&raw)),
            Ok(_) => fs::remove_file(&target).map_err(io_err("replace", &target))?,
            Err(_) => {}
        }
        if entry_type.is_file() {
            let mode = entry.header().mode().unwrap_or(0o644);
            let mut out = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(io_err("create", &target))?;
            io::copy(&mut entry, &mut out).map_err(bad)?;
            set_mode(&target, mode)?;
            files += 1;
        } else if entry_type.is_symlink() {
            let link = entry
                .link_name()
                .map_err(bad)?
                .ok_or_else(|| unsafe_entry(&raw))?
                .into_owned();
            if !link_stays_inside(&relative, &link) {
                return Err(unsafe_entry(&raw));
            }
            std::os::unix::fs::symlink(&link, &target)
                .map_err(io_err("create the link", &target))?;
            links.insert(relative);
        } else if entry_type.is_hard_link() {
            let link = entry
                .link_name()
                .map_err(bad)?
                .ok_or_else(|| unsafe_entry(&raw))?
                .into_owned();
            let Some(source) =
                sanitize_entry_path(&link, prefix).map_err(|_| unsafe_entry(&raw))?
            else {
                // A hard link to a file outside the part we keep: nothing to link to.
                continue;
            };
            if source.ancestors().any(|a| links.contains(a)) {
                return Err(unsafe_entry(&raw));
            }
            let source = dest.join(source);
            fs::copy(&source, &target).map_err(io_err("copy the linked file", &source))?;
            files += 1;
        } else {
            tracing::debug!(entry = %raw.display(), "skipping an archive entry that is not a file, folder or link");
        }
    }
    Ok(files)
}

/// Keeps the execute bits (CMake runs a few scripts), drops set-uid and friends.
fn set_mode(path: &Path, mode: u32) -> Result<(), SourceError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = (mode & 0o755) | 0o600;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(io_err("set the mode of", path))
}

/// The shallowest folder under `root` (itself included, three levels down at most) that looks
/// like a llama.cpp tree: a `CMakeLists.txt` next to `include/llama.h`. Finds the tree at the top
/// of a checkout, inside a release archive's single folder, or under `vendor/llama.cpp` of an
/// unpacked `llama-cpp-python` sdist.
pub fn find_source_tree(root: &Path) -> Option<PathBuf> {
    let mut level = vec![root.to_owned()];
    for _ in 0..=3 {
        let mut next = Vec::new();
        for dir in &level {
            if dir.join("CMakeLists.txt").is_file() && dir.join("include/llama.h").is_file() {
                return Some(dir.clone());
            }
            if let Ok(read) = fs::read_dir(dir) {
                let mut children: Vec<PathBuf> = read
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect();
                children.sort();
                next.extend(children);
            }
        }
        level = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_release_keeps_the_layout_and_is_labelled_by_its_version() {
        let release = BUNDLED_LLAMA_CPP.other_release("0.3.40");
        assert_eq!(release.file_name, "llama_cpp_python-0.3.40.tar.gz");
        assert_eq!(
            release.tree_prefix,
            "llama_cpp_python-0.3.40/vendor/llama.cpp"
        );
        assert_eq!(release.label, "py0.3.40");
        assert_eq!(release.commit, None);
        let ik = BUNDLED_IK_LLAMA_CPP.other_release("0.1.10");
        assert_eq!(ik.file_name, "ik_llama_cpp_python-0.1.10.tar.gz");
        assert_eq!(
            ik.tree_prefix,
            "ik_llama_cpp_python-0.1.10/vendor/ik_llama.cpp"
        );
        // Its own folder in the cache and in the engines folder: beside the pinned one.
        let sources = Path::new("/cache/sources");
        assert_ne!(
            release.tree_dir(sources),
            BUNDLED_LLAMA_CPP.tree_dir(sources)
        );
    }

    #[test]
    fn a_builds_release_is_read_back_from_its_label() {
        let pin = &BUNDLED_LLAMA_CPP;
        assert_eq!(pin.release_of_build("0c1e570").as_deref(), Some("0.3.36"));
        assert_eq!(pin.release_of_build("py0.3.40").as_deref(), Some("0.3.40"));
        assert_eq!(
            pin.release_of_build("0.5.0-dev (0c1e570)").as_deref(),
            Some("0.3.36"),
            "a registered binary of the pinned tree"
        );
        assert_eq!(pin.release_of_build("0.5.0-dev (abcdef0)"), None);
        assert_eq!(pin.release_of_build("src-0123456789ab"), None);
        assert_eq!(pin.release_of_build("local-01234567"), None);
        assert_eq!(pin.release_of_build("pyx"), None);
        assert_eq!(
            BUNDLED_IK_LLAMA_CPP.release_of_build("py0.1.5").as_deref(),
            Some("0.1.5")
        );
    }

    #[test]
    fn entry_paths_stay_inside_and_lose_the_prefix() {
        let prefix = Some(Path::new("pkg-1.0/vendor/llama.cpp"));
        assert_eq!(
            sanitize_entry_path(Path::new("pkg-1.0/vendor/llama.cpp/src/llama.cpp"), prefix),
            Ok(Some(PathBuf::from("src/llama.cpp")))
        );
        assert_eq!(
            sanitize_entry_path(
                Path::new("./pkg-1.0/vendor/llama.cpp/CMakeLists.txt"),
                prefix
            ),
            Ok(Some(PathBuf::from("CMakeLists.txt")))
        );
        assert_eq!(
            sanitize_entry_path(Path::new("pkg-1.0/setup.py"), prefix),
            Ok(None)
        );
        assert_eq!(
            sanitize_entry_path(Path::new("pkg-1.0/vendor/llama.cpp/"), prefix),
            Ok(None)
        );
        assert_eq!(
            sanitize_entry_path(Path::new("/etc/passwd"), None),
            Err(UnsafePath)
        );
        assert_eq!(
            sanitize_entry_path(Path::new("tree/../../escape"), None),
            Err(UnsafePath)
        );
        assert_eq!(
            sanitize_entry_path(Path::new("pkg-1.0/vendor/llama.cpp/../x"), prefix),
            Err(UnsafePath)
        );
    }

    #[test]
    fn links_may_point_within_the_tree_only() {
        assert!(link_stays_inside(Path::new("a/b/link"), Path::new("../c")));
        assert!(link_stays_inside(
            Path::new("a/link"),
            Path::new("./x/../y")
        ));
        assert!(!link_stays_inside(
            Path::new("a/link"),
            Path::new("../../up")
        ));
        assert!(!link_stays_inside(Path::new("link"), Path::new("/etc")));
    }

    fn tar_gz(path: &Path, entries: &[(&str, &[u8])]) {
        let file = File::create(path).unwrap();
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o755);
            header.set_entry_type(tar::EntryType::Regular);
            // Written raw, so a hostile name reaches the reader as it would in a real attack.
            let raw = header.as_old_mut().name.as_mut();
            raw[..name.len()].copy_from_slice(name.as_bytes());
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap();
    }

    #[test]
    fn unpacks_a_tree_and_finds_it_below_the_top_folder() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("src.tar.gz");
        tar_gz(
            &archive,
            &[
                ("llama.cpp-b1/CMakeLists.txt", b"project(x)"),
                ("llama.cpp-b1/include/llama.h", b"// header"),
                ("llama.cpp-b1/scripts/run.sh", b"#!/bin/sh"),
            ],
        );
        let dest = dir.path().join("out");
        fs::create_dir(&dest).unwrap();
        assert_eq!(extract_tar_gz(&archive, &dest, None).unwrap(), 3);
        assert_eq!(find_source_tree(&dest), Some(dest.join("llama.cpp-b1")));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dest.join("llama.cpp-b1/scripts/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "execute bits kept");
    }

    #[test]
    fn refuses_an_archive_that_climbs_out() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("evil.tar.gz");
        tar_gz(&archive, &[("tree/../../escaped.txt", b"gotcha")]);
        let dest = dir.path().join("a/b");
        fs::create_dir_all(&dest).unwrap();
        let err = extract_tar_gz(&archive, &dest, None).unwrap_err();
        assert!(matches!(err, SourceError::UnsafeEntry { .. }), "{err}");
        assert!(err.to_string().contains("escaped.txt"), "{err}");
        assert!(!dir.path().join("escaped.txt").exists());
    }

    #[test]
    fn a_file_that_is_not_gzip_is_a_bad_archive() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("not.tar.gz");
        fs::write(&archive, b"plain text, not gzip").unwrap();
        let err = extract_tar_gz(&archive, dir.path(), None).unwrap_err();
        assert!(matches!(err, SourceError::BadArchive { .. }), "{err}");
        assert!(err.to_string().contains("not.tar.gz"), "{err}");
    }

    #[test]
    fn the_pinned_source_is_the_one_in_the_architecture_notes() {
        assert_eq!(BUNDLED_LLAMA_CPP.requirement(), "llama-cpp-python==0.3.36");
        assert_eq!(BUNDLED_LLAMA_CPP.sha256.len(), 64);
        assert_eq!(
            BUNDLED_LLAMA_CPP.tree_dir(Path::new("/c/sources")),
            Path::new("/c/sources/llama-cpp-python-0.3.36/llama.cpp")
        );
    }
}
