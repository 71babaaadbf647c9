//! The HTTP client for the hub. Redirects are followed here, by hand, so that the token goes
//! only to the hub's own origin (the hub sends large files to a CDN on another host), a loop
//! or an https → http downgrade is refused, and the final address is known (the downloader
//! reuses it for every range of a file).

use reqwest::header::{HeaderMap, AUTHORIZATION, LOCATION, RANGE, RETRY_AFTER};
use reqwest::{Response, StatusCode};
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::future::Future;
use std::ops::Range;
use std::time::Duration;
use url::Url;

use super::error::{seconds_text, HubError};
use super::redact::shown_url;
use crate::config::{HubConfig, HubToken};
use crate::repo::{CommitId, RepoId, RepoPath};

/// Redirects followed before giving up (the hub uses one or two).
const MAX_REDIRECTS: usize = 10;
/// Bound on a JSON or text answer read into memory (a model listing or a card).
pub const MAX_ANSWER_BYTES: u64 = 32 << 20;
/// The longest pause a server's `Retry-After` can impose on us; a longer ask is cut to this,
/// and the message says so (a `Retry-After: 86400` would otherwise hold a download for a day).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Whole-answer deadline for API calls (not for file bodies, which the downloader watches for
/// stalls instead).
const API_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the hub may keep an API call waiting, and how often a failed call is tried again.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// From sending a request to the answer's headers.
    pub response_deadline: Duration,
    /// Without a byte of an API answer's body (model info, a listing page, a card).
    pub body_stall: Duration,
    /// Tries of one API call when it fails for a reason that may pass (the network, the
    /// server's side, a rate limit, no answer).
    pub api_attempts: u32,
    /// First wait between two tries, doubled after each (a server's `Retry-After`, capped at
    /// [`MAX_RETRY_AFTER`], takes its place).
    pub retry_wait: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            response_deadline: Duration::from_secs(30),
            body_stall: Duration::from_secs(30),
            api_attempts: 3,
            retry_wait: Duration::from_secs(1),
        }
    }
}

#[derive(Clone, Debug)]
pub struct HubClient {
    http: reqwest::Client,
    endpoint: Url,
    token: Option<HubToken>,
    options: ClientOptions,
}

/// A successful answer and the address that gave it, after redirects.
pub struct Fetched {
    pub response: Response,
    pub url: Url,
}

impl HubClient {
    pub fn new(config: &HubConfig) -> Result<HubClient, HubError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("rigdeck/", env!("CARGO_PKG_VERSION")))
            // Sizes and hashes are of the stored bytes: never let a server compress them.
            .no_gzip()
            .build()
            .map_err(|e| HubError::Network {
                url: shown_url(&config.endpoint),
                detail: e.to_string(),
            })?;
        Ok(HubClient {
            http,
            endpoint: config.endpoint.clone(),
            token: config.token.clone(),
            options: ClientOptions::default(),
        })
    }

    /// The same client with other deadlines and retries.
    pub fn with_options(mut self, options: ClientOptions) -> HubClient {
        self.options = options;
        self
    }

    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The endpoint with path segments appended, each percent-encoded.
    pub fn url<'a>(&self, segments: impl IntoIterator<Item = &'a str>) -> Url {
        let mut url = self.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// The repository's page on the hub, for links shown to the user.
    pub fn page_url(&self, repo: &RepoId) -> Url {
        self.url(repo.as_str().split('/'))
    }

    /// `…/{owner}/{name}/resolve/{commit}/{path}`: the file's content at one commit.
    pub fn resolve_url(&self, repo: &RepoId, commit: &CommitId, file: &RepoPath) -> Url {
        let segments = repo
            .as_str()
            .split('/')
            .chain(["resolve", commit.as_str()])
            .chain(file.as_str().split('/'));
        self.url(segments)
    }

    /// GET with redirects followed by hand; `range` asks for those bytes only.
    pub async fn get(&self, start: &Url, range: Option<Range<u64>>) -> Result<Fetched, HubError> {
        let mut url = start.clone();
        let mut visited = HashSet::new();
        for _ in 0..=MAX_REDIRECTS {
            if !visited.insert(url.clone()) {
                return Err(HubError::RedirectLoop {
                    url: shown_url(start),
                    hops: visited.len(),
                });
            }
            let response = self.send_once(&url, range.clone()).await?;
            if !response.status().is_redirection() {
                let response = check_status(response, &url).await?;
                return Ok(Fetched { response, url });
            }
            url = next_hop(&url, response.headers())?;
        }
        Err(HubError::RedirectLoop {
            url: shown_url(start),
            hops: MAX_REDIRECTS,
        })
    }

    async fn send_once(&self, url: &Url, range: Option<Range<u64>>) -> Result<Response, HubError> {
        let mut request = self.http.get(url.clone());
        if let (Some(token), true) = (&self.token, same_origin(url, &self.endpoint)) {
            request = request.header(AUTHORIZATION, token.bearer());
        }
        if let Some(range) = range {
            let last = range.end.saturating_sub(1);
            request = request.header(RANGE, format!("bytes={}-{last}", range.start));
        }
        let deadline = self.options.response_deadline;
        match tokio::time::timeout(deadline, request.send()).await {
            Ok(sent) => sent.map_err(|e| network_error(url, &e)),
            Err(_) => Err(HubError::no_response(url, deadline)),
        }
    }

    /// Runs one API call, again while it fails for a reason that may pass, at most
    /// `api_attempts` times; the waits double from `retry_wait`, or follow the server's
    /// `Retry-After` (capped).
    async fn with_retries<T, F, Fut>(&self, call: F) -> Result<T, HubError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, HubError>>,
    {
        let mut attempt = 1u32;
        loop {
            match call().await {
                Err(error) if error.is_transient() && attempt < self.options.api_attempts => {
                    let doubled = 1u32 << (attempt - 1).min(8);
                    let wait = error
                        .retry_after()
                        .unwrap_or_else(|| self.options.retry_wait.saturating_mul(doubled));
                    tracing::warn!(attempt, "{error}; trying again in {}", seconds_text(wait));
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// An answer's body (at most `limit` bytes) and its headers, with retries.
    pub(crate) async fn get_bytes(
        &self,
        url: &Url,
        limit: u64,
    ) -> Result<(Vec<u8>, HeaderMap), HubError> {
        self.with_retries(|| async {
            let fetched = self.get(url, None).await?;
            let headers = fetched.response.headers().clone();
            let body = self.read_bounded(fetched.response, url, limit).await?;
            Ok((body, headers))
        })
        .await
    }

    /// A JSON answer (bounded in size) and its headers.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        url: &Url,
    ) -> Result<(T, HeaderMap), HubError> {
        let (body, headers) = self.get_bytes(url, MAX_ANSWER_BYTES).await?;
        Ok((parse_json(&body, url)?, headers))
    }

    /// A text answer (a model card), bounded in size; invalid UTF-8 is replaced, not refused.
    pub async fn get_text(&self, url: &Url, limit: u64) -> Result<String, HubError> {
        let (body, _) = self.get_bytes(url, limit).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// Reads a whole answer, refusing one longer than `limit` before holding it, one that
    /// sends no byte for `body_stall`, and one that takes longer than `API_TIMEOUT` in all.
    async fn read_bounded(
        &self,
        mut response: Response,
        url: &Url,
        limit: u64,
    ) -> Result<Vec<u8>, HubError> {
        let too_large = || HubError::TooLarge {
            url: shown_url(url),
            limit,
        };
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let stall = self.options.body_stall;
        let mut body = Vec::new();
        let read = async {
            loop {
                let chunk = tokio::time::timeout(stall, response.chunk())
                    .await
                    .map_err(|_| HubError::BodyStalled {
                        url: shown_url(url),
                        waited: stall,
                    })?
                    .map_err(|e| network_error(url, &e))?;
                let Some(chunk) = chunk else {
                    return Ok(());
                };
                if body.len() as u64 + chunk.len() as u64 > limit {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
        };
        tokio::time::timeout(API_TIMEOUT, read)
            .await
            .map_err(|_| HubError::Timeout {
                url: shown_url(url),
                seconds: API_TIMEOUT.as_secs(),
            })??;
        Ok(body)
    }
}

/// An answer's body as JSON.
pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8], url: &Url) -> Result<T, HubError> {
    serde_json::from_slice(body).map_err(|e| HubError::Parse {
        url: shown_url(url),
        detail: e.to_string(),
    })
}

/// Scheme, host and port equal: where the token may go.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// The address a redirect points to, refused when missing, unparsable, or by [`hop_refusal`].
fn next_hop(from: &Url, headers: &HeaderMap) -> Result<Url, HubError> {
    let bad = |to: &str, why| HubError::BadRedirect {
        from: shown_url(from),
        to: to
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect(),
        why,
    };
    let location = headers
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| bad("nowhere", "without a usable Location header"))?;
    let to = from
        .join(location)
        .map_err(|_| bad(location, "which is not an address"))?;
    match hop_refusal(from, &to) {
        Some(why) => Err(bad(location, why)),
        None => Ok(to),
    }
}

/// Why a redirect from `from` to `to` is not followed, if it is not: every hub request
/// follows this rule (an https → http downgrade would send the request, and on the hub's own
/// host its token, in the clear).
fn hop_refusal(from: &Url, to: &Url) -> Option<&'static str> {
    match (from.scheme(), to.scheme()) {
        ("https", "http") => Some("from https down to plain http"),
        (_, "http" | "https") => None,
        _ => Some("which is not an http(s) address"),
    }
}

/// The redirect policy for a `reqwest` client that follows redirects itself (the fit path's
/// header reads), with the rule [`HubClient::get`] follows by hand: at most `MAX_REDIRECTS`
/// hops, no loop, no downgrade or other scheme ([`hop_refusal`]). `reqwest` drops the token
/// when the host or port changes, and a refused downgrade is never sent.
pub fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let refusal = match attempt.previous() {
            previous if previous.len() > MAX_REDIRECTS => Some("more than 10 redirects"),
            previous if previous.contains(attempt.url()) => Some("a redirect loop"),
            [.., from] => hop_refusal(from, attempt.url()),
            [] => None,
        };
        match refusal {
            Some(why) => {
                let to = shown_url(attempt.url());
                attempt.error(format!("redirected to {to}, {why}; refused"))
            }
            None => attempt.follow(),
        }
    })
}

fn network_error(url: &Url, error: &reqwest::Error) -> HubError {
    // The chain holds the useful part ("connection refused", "dns error …"); the address it
    // names loses its query, as every address shown does.
    let mut detail = error.to_string();
    if let Some(named) = error.url() {
        detail = detail.replace(named.as_str(), &shown_url(named));
    }
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        detail = format!("{detail}: {inner}");
        source = inner.source();
    }
    if error.is_timeout() {
        return HubError::Timeout {
            url: shown_url(url),
            seconds: CONNECT_TIMEOUT.as_secs(),
        };
    }
    HubError::Network {
        url: shown_url(url),
        detail,
    }
}

/// Turns an error status into the error that names what to do; the hub explains itself in
/// `X-Error-Code` / `X-Error-Message` headers (and sometimes a JSON body).
async fn check_status(response: Response, url: &Url) -> Result<Response, HubError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.chars().take(300).collect::<String>())
    };
    let code = header("x-error-code").unwrap_or_default();
    let message = header("x-error-message");
    let asked_s = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let detail = message.map_or_else(String::new, |m| format!(": {m}"));
    let url_text = shown_url(url);
    Err(match status {
        _ if code == "GatedRepo" => HubError::Gated {
            repo: repo_of(url),
            detail,
        },
        StatusCode::NOT_FOUND => HubError::NotFound {
            what: match code.as_str() {
                "RevisionNotFound" => "that revision".into(),
                "EntryNotFound" => "that file".into(),
                _ => format!("'{}'", repo_of(url)),
            },
            url: url_text,
        },
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => HubError::Unauthorized {
            url: url_text,
            status: status.as_u16(),
            detail: detail.trim_start_matches(": ").to_owned(),
        },
        StatusCode::TOO_MANY_REQUESTS => HubError::RateLimited {
            url: url_text,
            retry_after: asked_s.map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER)),
            asked_s,
        },
        s if s.is_server_error() || s == StatusCode::REQUEST_TIMEOUT => HubError::Server {
            url: url_text,
            status: s.as_u16(),
            detail,
        },
        s => HubError::Status {
            url: url_text,
            status: s.as_u16(),
            detail,
        },
    })
}

/// `owner/name` from a hub address (`/{owner}/{name}/resolve/…` or `/api/models/{owner}/{name}…`),
/// for messages only.
fn repo_of(url: &Url) -> String {
    let segments: Vec<&str> = url
        .path_segments()
        .map(Iterator::collect)
        .unwrap_or_default();
    let start = match segments.as_slice() {
        ["api", "models", ..] => 2,
        _ => 0,
    };
    segments
        .get(start..start + 2)
        .map_or_else(|| url.path().to_owned(), |pair| pair.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("url")
    }

    #[test]
    fn the_token_goes_to_the_hubs_own_origin_only() {
        let hub = url("https://huggingface.co");
        assert!(same_origin(&url("https://huggingface.co/a/b"), &hub));
        assert!(same_origin(&url("https://huggingface.co:443/a"), &hub));
        assert!(!same_origin(&url("https://cdn-lfs.hf.co/a"), &hub));
        assert!(!same_origin(&url("http://huggingface.co/a"), &hub));
        assert!(!same_origin(&url("https://huggingface.co:8443/a"), &hub));
    }

    #[test]
    fn redirects_are_resolved_and_downgrades_refused() {
        let from = url("https://huggingface.co/a/b/resolve/x/f.gguf");
        let headers = |location: &str| {
            let mut map = HeaderMap::new();
            map.insert(LOCATION, location.parse().expect("header"));
            map
        };
        assert_eq!(
            next_hop(&from, &headers("/api/other"))
                .expect("relative")
                .as_str(),
            "https://huggingface.co/api/other"
        );
        assert!(next_hop(&from, &headers("https://cdn.example/x")).is_ok());
        let error = next_hop(&from, &headers("http://cdn.example/x")).expect_err("downgrade");
        assert!(error.to_string().contains("plain http"), "{error}");
        assert!(next_hop(&from, &headers("file:///etc/passwd")).is_err());
        assert!(next_hop(&from, &HeaderMap::new()).is_err());
    }

    #[test]
    fn urls_are_built_from_encoded_segments() {
        let config = HubConfig {
            endpoint: url("http://mirror.local/hf"),
            cache_dir: "/tmp".into(),
            token: None,
        };
        let client = HubClient::new(&config).expect("client");
        let repo = RepoId::parse("o/n").expect("repo");
        let commit = CommitId::parse(&"a".repeat(40)).expect("commit");
        let file = RepoPath::parse("Q4 K/m#1?.gguf").expect("path");
        assert_eq!(
            client.resolve_url(&repo, &commit, &file).as_str(),
            format!(
                "http://mirror.local/hf/o/n/resolve/{}/Q4%20K/m%231%3F.gguf",
                "a".repeat(40)
            )
        );
        assert_eq!(repo_of(&url("https://h/api/models/o/n/tree/main")), "o/n");
        assert_eq!(repo_of(&url("https://h/o/n/resolve/main/f")), "o/n");
    }
}
