//! One file from a Python package index over HTTP(S): found through the index's "simple" API
//! (PEP 691 JSON, or PEP 503 HTML from indexes that only speak that) and streamed to disk while it
//! is hashed. Nothing here runs, installs or unpacks what it fetches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use reqwest::{header, Client, Response, StatusCode, Url};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::time::Instant;

use super::find_in_path;

/// PyPI's simple index: the default, as for pip.
pub const PYPI_SIMPLE_URL: &str = "https://pypi.org/simple";
/// pip's variable for the index, honoured here so that one setting serves both.
pub const INDEX_URL_ENV: &str = "PIP_INDEX_URL";
/// PEP 691 JSON when the index has it, PEP 503 HTML otherwise.
const SIMPLE_ACCEPT: &str = "application/vnd.pypi.simple.v1+json, text/html;q=0.1";
/// A project page larger than this is not an index page (PyPI's biggest are a few MB).
const PAGE_MAX_BYTES: u64 = 32 * 1_000_000;
/// Progress is reported each time this many more bytes have arrived.
const PROGRESS_STEP: u64 = 8 * 1_000_000;
/// CA bundles named the way pip and OpenSSL read them.
const CA_BUNDLE_ENVS: [&str; 2] = ["PIP_CERT", "SSL_CERT_FILE"];
/// The system's CA bundle on Debian/Ubuntu, Fedora/RHEL, openSUSE, Alpine/Arch: where a company
/// installs the CA of a proxy that re-signs HTTPS, which pip and curl then trust.
const SYSTEM_CA_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// How long the network may take before a fetch is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Opening a connection (to the index or to the host serving the file).
    pub connect: Duration,
    /// The longest silence while an answer arrives: a stalled server is cut off.
    pub read: Duration,
    /// A whole page or download, so that a server trickling a byte now and then is cut off too.
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(20),
            read: Duration::from_secs(60),
            // 76 MB in an hour is 21 kB/s: slower than that, something is wrong.
            total: Duration::from_secs(3600),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("'{url}' is not a usable package index URL ({reason})")]
    BadIndexUrl { url: String, reason: String },
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: Url, reason: String },
    #[error("{url} does not know the project (HTTP 404)")]
    NoProject { url: Url },
    #[error("{url} answered HTTP {status}")]
    Status { url: Url, status: StatusCode },
    #[error("{url} is not a package index page: {reason}")]
    BadPage { url: Url, reason: String },
    #[error("{url} does not list {file}")]
    NoFile { url: Url, file: String },
    #[error("the transfer from {url} stopped: {reason}")]
    Transfer { url: Url, reason: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `url` with any user name and password taken out, for messages and logs.
pub fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            // Both setters only fail for URLs that cannot carry credentials at all.
            let _ = parsed.set_password(None);
            let _ = parsed.set_username("");
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// The index to fetch from, chosen as pip chooses it: `explicit` (a `--index-url`), else
/// `PIP_INDEX_URL`, else pip's own `global.index-url` setting (only read, with
/// `python3 -m pip config get`; skipped when python3 or pip is missing), else PyPI.
pub async fn resolve_index_url(explicit: Option<&str>) -> String {
    let given = |text: &str| Some(text.trim().to_owned()).filter(|t| !t.is_empty());
    if let Some(url) = explicit.and_then(given) {
        return url;
    }
    if let Some(url) = std::env::var(INDEX_URL_ENV).ok().as_deref().and_then(given) {
        return url;
    }
    if let Some(url) = pip_configured_index_url().await.as_deref().and_then(given) {
        return url;
    }
    PYPI_SIMPLE_URL.to_owned()
}

async fn pip_configured_index_url() -> Option<String> {
    let python = find_in_path("python3")?;
    let mut command = Command::new(python);
    command
        .args(["-m", "pip", "config", "get", "global.index-url"])
        .env("PIP_NO_INPUT", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(20), command.output())
        .await
        .ok()?
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// An index URL as given (a trailing slash or not), checked to be http(s).
pub fn parse_index_url(text: &str) -> Result<Url, IndexError> {
    let bad = |reason: String| IndexError::BadIndexUrl {
        url: text.to_owned(),
        reason,
    };
    let url = Url::parse(&format!("{}/", text.trim().trim_end_matches('/')))
        .map_err(|e| bad(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(bad(format!(
            "scheme '{other}': give an http:// or https:// URL"
        ))),
    }
}

/// The project's name as the simple API spells it (PEP 503): lower case, runs of `-`, `_` and
/// `.` turned into one `-`.
pub fn normalized_project_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// A client for index pages and files with the given timeouts. Redirects are followed: PyPI
/// serves its files from another host. Besides the built-in roots it trusts the system's CA
/// bundle and the ones `PIP_CERT` and `SSL_CERT_FILE` name, as pip does.
pub fn client(timeouts: &Timeouts) -> Result<Client, IndexError> {
    let builder = || {
        Client::builder()
            .user_agent(concat!("rigdeck/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(timeouts.connect)
            .read_timeout(timeouts.read)
    };
    extra_root_certificates()
        .into_iter()
        .fold(builder(), |b, cert| b.add_root_certificate(cert))
        .build()
        .or_else(|err| {
            // A bundle rustls cannot take must not stop what the built-in roots can fetch.
            tracing::warn!("ignoring the extra CA certificates: {}", error_chain(&err));
            builder().build()
        })
        .map_err(|err| IndexError::Client(error_chain(&err)))
}

fn extra_root_certificates() -> Vec<reqwest::Certificate> {
    let named = CA_BUNDLE_ENVS
        .iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let system = SYSTEM_CA_BUNDLES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    let mut files: Vec<PathBuf> = named.chain(system).collect();
    files.sort();
    files.dedup();
    files.iter().flat_map(|f| read_ca_bundle(f)).collect()
}

/// The certificates of a PEM bundle; none, with a warning, when it cannot be read.
fn read_ca_bundle(file: &Path) -> Vec<reqwest::Certificate> {
    let parsed = std::fs::read(file)
        .map_err(|e| e.to_string())
        .and_then(|pem| reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| error_chain(&e)));
    parsed.unwrap_or_else(|reason| {
        tracing::warn!("ignoring the CA bundle {}: {reason}", file.display());
        Vec::new()
    })
}

/// A file as the index lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Where to download it from (absolute, without the `#sha256=` fragment).
    pub url: Url,
    /// The sha256 the index states for it, lower case, when it states one.
    pub sha256: Option<String>,
}

/// The project's page on the index: `{index}/{normalized name}/`.
pub fn project_page(index: &Url, project: &str) -> Result<Url, IndexError> {
    index
        .join(&format!("{}/", normalized_project_name(project)))
        .map_err(|e| IndexError::BadIndexUrl {
            url: index.to_string(),
            reason: e.to_string(),
        })
}

/// Looks `file_name` up on `project`'s page of the index.
pub async fn find_file(
    client: &Client,
    index: &Url,
    project: &str,
    file_name: &str,
    timeouts: &Timeouts,
) -> Result<ListedFile, IndexError> {
    let (base, entries) = project_files(client, index, project, timeouts).await?;
    let entry = entries
        .into_iter()
        .find(|e| e.filename == file_name)
        .ok_or_else(|| IndexError::NoFile {
            url: base.clone(),
            file: file_name.to_owned(),
        })?;
    resolve(entry, &base)
}

/// The final releases of `project` the index serves (no pre-, dev- or local versions), newest
/// first.
pub async fn project_versions(
    client: &Client,
    index: &Url,
    project: &str,
    timeouts: &Timeouts,
) -> Result<Vec<String>, IndexError> {
    let (_, entries) = project_files(client, index, project, timeouts).await?;
    let names: Vec<&str> = entries.iter().map(|e| e.filename.as_str()).collect();
    Ok(release_versions(&names, project))
}

/// The page's address after redirects, and its file entries.
async fn project_files(
    client: &Client,
    index: &Url,
    project: &str,
    timeouts: &Timeouts,
) -> Result<(Url, Vec<PageEntry>), IndexError> {
    let page = project_page(index, project)?;
    let response = send(
        client
            .get(page.clone())
            .header(header::ACCEPT, SIMPLE_ACCEPT),
        &page,
    )
    .await
    .map_err(|err| match err {
        IndexError::Status {
            url,
            status: StatusCode::NOT_FOUND,
        } => IndexError::NoProject { url },
        other => other,
    })?;
    let base = response.url().clone();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    let mut body = LimitedBody::new(response, timeouts, PAGE_MAX_BYTES)?;
    let mut text = Vec::new();
    while let Some(chunk) = body.next().await? {
        text.extend_from_slice(chunk.as_ref());
    }
    let text = String::from_utf8_lossy(&text);
    let entries = if is_json {
        json_entries(&text).map_err(|reason| IndexError::BadPage {
            url: base.clone(),
            reason,
        })?
    } else {
        html_entries(&text)
    };
    Ok((base, entries))
}

/// The final-release versions in a project's file names (wheels `name-1.2.3-….whl`, source
/// archives `name-1.2.3.tar.gz`), newest first, each once.
pub fn release_versions(file_names: &[&str], project: &str) -> Vec<String> {
    let wanted = normalized_project_name(project);
    let mut versions: Vec<Vec<u64>> = file_names
        .iter()
        .filter_map(|name| {
            let stem = name
                .strip_suffix(".whl")
                .or_else(|| name.strip_suffix(".tar.gz"))
                .or_else(|| name.strip_suffix(".zip"))?;
            // A wheel's name has no '-' (PEP 427); an sdist's may, so its version is after the last.
            let (name_part, version) = match name.ends_with(".whl") {
                true => {
                    let mut parts = stem.splitn(3, '-');
                    (parts.next()?, parts.next()?)
                }
                false => stem.rsplit_once('-')?,
            };
            (normalized_project_name(name_part) == wanted).then_some(version)?;
            release_numbers(version)
        })
        .collect();
    versions.sort_unstable_by(|a, b| b.cmp(a));
    versions.dedup();
    versions
        .into_iter()
        .map(|v| {
            let parts: Vec<String> = v.iter().map(u64::to_string).collect();
            parts.join(".")
        })
        .collect()
}

/// "0.3.40, 0.3.39, …" (at most five), or "none".
pub fn newest_releases_text(versions: &[String]) -> String {
    match versions {
        [] => "none".to_owned(),
        _ => versions
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// `1.2.3` as numbers, which order releases; `None` for anything else (`1.2.3rc1`, `1.2.dev0`,
/// `1.2+local`, `1.2.post1`).
pub fn release_numbers(version: &str) -> Option<Vec<u64>> {
    version.split('.').map(|part| part.parse().ok()).collect()
}

/// What a finished download was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    /// The sha256 of the bytes written, lower case.
    pub sha256: String,
    pub bytes: u64,
}

/// Streams `url` into a new file `dest`, hashing each chunk as it is written (the file is never
/// read back). More than `max_bytes` is refused; `progress` hears "12 of 77 MB" every few MB
/// (`expected_bytes` when the server gives no length). The caller owns `dest`, and removes it
/// unless it keeps the result.
pub async fn download(
    client: &Client,
    url: &Url,
    dest: &Path,
    max_bytes: u64,
    expected_bytes: u64,
    timeouts: &Timeouts,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Downloaded, IndexError> {
    let response = send(client.get(url.clone()), url).await?;
    let total = response.content_length().unwrap_or(expected_bytes);
    let mut body = LimitedBody::new(response, timeouts, max_bytes)?;
    let write_err = |source| IndexError::Write {
        path: dest.to_owned(),
        source,
    };
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)
        .await
        .map_err(write_err)?;
    let mut hasher = Sha256::new();
    let mut next_report = PROGRESS_STEP;
    while let Some(chunk) = body.next().await? {
        hasher.update(chunk.as_ref());
        file.write_all(chunk.as_ref()).await.map_err(write_err)?;
        if body.received >= next_report {
            progress(&format!(
                "{} of {} MB",
                body.received / 1_000_000,
                total / 1_000_000
            ));
            next_report = body.received + PROGRESS_STEP;
        }
    }
    file.sync_all().await.map_err(write_err)?;
    Ok(Downloaded {
        sha256: hex(&hasher.finalize()),
        bytes: body.received,
    })
}

async fn send(request: reqwest::RequestBuilder, url: &Url) -> Result<Response, IndexError> {
    let response = request.send().await.map_err(|e| IndexError::Unreachable {
        url: url.clone(),
        reason: error_chain(&e),
    })?;
    match response.status() {
        status if status.is_success() => Ok(response),
        status => Err(IndexError::Status {
            url: response.url().clone(),
            status,
        }),
    }
}

/// An answer's body, read chunk by chunk within the size budget and the time limits.
struct LimitedBody<'a> {
    response: Response,
    timeouts: &'a Timeouts,
    deadline: Instant,
    max_bytes: u64,
    received: u64,
}

impl<'a> LimitedBody<'a> {
    /// Refuses at once an answer that declares more than `max_bytes`.
    fn new(response: Response, timeouts: &'a Timeouts, max_bytes: u64) -> Result<Self, IndexError> {
        let body = Self {
            response,
            timeouts,
            deadline: Instant::now() + timeouts.total,
            max_bytes,
            received: 0,
        };
        match body.response.content_length() {
            Some(declared) if declared > max_bytes => Err(body.stopped(body.over_budget(declared))),
            _ => Ok(body),
        }
    }

    fn stopped(&self, reason: String) -> IndexError {
        IndexError::Transfer {
            url: self.response.url().clone(),
            reason,
        }
    }

    /// The next chunk, `None` at the end.
    async fn next(&mut self) -> Result<Option<impl AsRef<[u8]>>, IndexError> {
        let chunk = match tokio::time::timeout_at(self.deadline, self.response.chunk()).await {
            Err(_) => {
                return Err(self.stopped(format!(
                    "it took longer than {} s in all ({} MB received)",
                    self.timeouts.total.as_secs(),
                    self.received / 1_000_000
                )))
            }
            Ok(Err(err)) if err.is_timeout() => {
                return Err(self.stopped(format!(
                    "the server sent nothing for {} ms ({} bytes received)",
                    self.timeouts.read.as_millis(),
                    self.received
                )))
            }
            Ok(Err(err)) => return Err(self.stopped(error_chain(&err))),
            Ok(Ok(chunk)) => chunk,
        };
        if let Some(chunk) = &chunk {
            self.received += chunk.len() as u64;
            if self.received > self.max_bytes {
                return Err(self.stopped(self.over_budget(self.received)));
            }
        }
        Ok(chunk)
    }

    fn over_budget(&self, bytes: u64) -> String {
        format!(
            "it sends {bytes} bytes or more, over the {} allowed",
            self.max_bytes
        )
    }
}

/// A file entry of a project page before its URL is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PageEntry {
    filename: String,
    href: String,
    sha256: Option<String>,
}

/// The files of a PEP 691 JSON page.
fn json_entries(text: &str) -> Result<Vec<PageEntry>, String> {
    #[derive(Deserialize)]
    struct Page {
        files: Vec<File>,
    }
    #[derive(Deserialize)]
    struct File {
        filename: String,
        url: String,
        #[serde(default)]
        hashes: HashMap<String, String>,
    }
    let page: Page = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(page
        .files
        .into_iter()
        .map(|mut f| PageEntry {
            sha256: f.hashes.remove("sha256"),
            filename: f.filename,
            href: f.url,
        })
        .collect())
}

/// The links of a PEP 503 HTML page: `<a href="URL#sha256=HEX">filename</a>`.
fn html_entries(text: &str) -> Vec<PageEntry> {
    static ANCHOR: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"(?is)<a\s[^>]*?\bhref\s*=\s*(?:"([^"]*)"|'([^']*)')[^>]*>(.*?)</a\s*>"#)
            .expect("a constant, valid pattern")
    });
    ANCHOR
        .captures_iter(text)
        .filter_map(|c| {
            let href = c.get(1).or_else(|| c.get(2))?.as_str();
            Some(PageEntry {
                filename: unescape_html(c.get(3)?.as_str().trim()),
                href: unescape_html(href),
                sha256: None,
            })
        })
        .collect()
}

/// The few entities an index page puts in a URL or a file name.
fn unescape_html(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The entry's absolute URL (relative ones are taken against the page), with the sha256 from the
/// listing or from a `#sha256=` fragment.
fn resolve(entry: PageEntry, page: &Url) -> Result<ListedFile, IndexError> {
    let mut url = page.join(&entry.href).map_err(|e| IndexError::BadPage {
        url: page.clone(),
        reason: format!("the link '{}' of {}: {e}", entry.href, entry.filename),
    })?;
    let from_fragment = url
        .fragment()
        .and_then(|f| f.strip_prefix("sha256="))
        .map(str::to_owned);
    url.set_fragment(None);
    Ok(ListedFile {
        url,
        sha256: entry
            .sha256
            .or(from_fragment)
            .map(|h| h.trim().to_ascii_lowercase()),
    })
}

/// An error with its causes, which is where reqwest says what went wrong (DNS, TLS, refused).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Lower-case hex of a digest, as package indexes and pins write sha256.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_versions_are_final_ones_newest_first() {
        let names = [
            "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl",
            "vllm-0.11.0.tar.gz",
            "vllm-0.9.2-cp38-abi3-manylinux1_x86_64.whl",
            "vllm-0.33.0-cp38-abi3-manylinux1_x86_64.whl",
            "vllm-0.34.0rc1-cp38-abi3-manylinux1_x86_64.whl",
            "vllm-0.12.0.dev3.tar.gz",
            "vllm_flash-9.9.9-py3-none-any.whl",
            "README.txt",
        ];
        assert_eq!(
            release_versions(&names, "vllm"),
            ["0.33.0", "0.11.0", "0.9.2"]
        );
        let sglang = ["sglang-0.5.23-py3-none-any.whl", "sglang-0.5.3.tar.gz"];
        assert_eq!(release_versions(&sglang, "SGLang"), ["0.5.23", "0.5.3"]);
    }

    #[test]
    fn credentials_in_an_index_url_stay_out_of_messages() {
        assert_eq!(
            without_credentials("https://user:s3cret@mirror.example/simple"),
            "https://mirror.example/simple"
        );
        assert_eq!(
            without_credentials("https://pypi.org/simple"),
            "https://pypi.org/simple"
        );
        assert_eq!(without_credentials("not a url"), "not a url");
    }

    #[test]
    fn project_names_are_normalized_as_the_simple_api_wants() {
        assert_eq!(
            normalized_project_name("llama-cpp-python"),
            "llama-cpp-python"
        );
        assert_eq!(
            normalized_project_name("Llama_CPP.__Python"),
            "llama-cpp-python"
        );
    }

    #[test]
    fn the_project_page_sits_under_the_index_with_or_without_a_trailing_slash() {
        for given in [
            "https://mirror.example/simple",
            "https://mirror.example/simple/",
        ] {
            let index = parse_index_url(given).unwrap();
            assert_eq!(
                project_page(&index, "llama_cpp_python").unwrap().as_str(),
                "https://mirror.example/simple/llama-cpp-python/"
            );
        }
        let err = parse_index_url("file:///srv/simple").unwrap_err();
        assert!(err.to_string().contains("http:// or https://"), "{err}");
        assert!(parse_index_url("not a url").is_err());
    }

    #[test]
    fn html_links_resolve_against_the_page_and_keep_their_hash() {
        let page = Url::parse("https://idx.example/simple/pkg/").unwrap();
        let html = r#"<html><body>
            <a href="../../files/pkg-1.0.tar.gz#sha256=ABCD" data-requires-python="&gt;=3.8">pkg-1.0.tar.gz</a><br/>
            <A HREF='https://cdn.example/p/pkg-2.0.tar.gz?x=1&amp;y=2'> pkg-2.0.tar.gz </A>
            </body></html>"#;
        let entries = html_entries(html);
        assert_eq!(entries.len(), 2, "{entries:?}");
        let first = resolve(entries[0].clone(), &page).unwrap();
        assert_eq!(
            first.url.as_str(),
            "https://idx.example/files/pkg-1.0.tar.gz"
        );
        assert_eq!(first.sha256.as_deref(), Some("abcd"));
        assert_eq!(entries[1].filename, "pkg-2.0.tar.gz");
        let second = resolve(entries[1].clone(), &page).unwrap();
        assert_eq!(
            second.url.as_str(),
            "https://cdn.example/p/pkg-2.0.tar.gz?x=1&y=2"
        );
        assert_eq!(second.sha256, None);
    }

    #[test]
    fn json_pages_give_the_listed_sha256() {
        let text = r#"{"meta":{"api-version":"1.1"},"name":"pkg","files":[
            {"filename":"pkg-1.0.tar.gz","url":"https://f.example/pkg-1.0.tar.gz","hashes":{"sha256":"00ff"}},
            {"filename":"pkg-1.0-py3-none-any.whl","url":"pkg-1.0-py3-none-any.whl","hashes":{}}]}"#;
        let entries = json_entries(text).unwrap();
        assert_eq!(entries[0].sha256.as_deref(), Some("00ff"));
        let page = Url::parse("https://idx.example/simple/pkg/").unwrap();
        let wheel = resolve(entries[1].clone(), &page).unwrap();
        assert_eq!(
            wheel.url.as_str(),
            "https://idx.example/simple/pkg/pkg-1.0-py3-none-any.whl"
        );
        assert!(json_entries("<html>").is_err());
    }

    #[tokio::test]
    async fn an_index_url_given_explicitly_wins() {
        assert_eq!(
            resolve_index_url(Some(" https://mirror.example/simple ")).await,
            "https://mirror.example/simple"
        );
    }
}
