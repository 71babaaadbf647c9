//! What can go wrong talking to the hub, each case with the thing it concerns and what to do.

use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum HubError {
    #[error("could not reach {url}: {detail}; check the network (or HF_ENDPOINT) and retry")]
    Network { url: String, detail: String },
    #[error("{url} did not answer within {seconds} s; the transfer is retried, or retry later")]
    Timeout { url: String, seconds: u64 },
    #[error("the hub at {origin} accepted the connection but sent no response headers for {} ({url}): check HF_ENDPOINT (or the network) and retry", seconds_text(*waited))]
    NoResponse {
        origin: String,
        url: String,
        waited: Duration,
    },
    #[error("{url} stopped sending its answer (no byte for {}): check HF_ENDPOINT (or the network) and retry", seconds_text(*waited))]
    BodyStalled { url: String, waited: Duration },
    #[error("{what} was not found on the hub ({url}): check the name and the revision")]
    NotFound { what: String, url: String },
    #[error("{repo} is gated: accept its terms on the hub's page for it, then give Rigdeck a token that may read it (rigdeck hub login, or HF_TOKEN){detail}")]
    Gated { repo: String, detail: String },
    #[error("the hub refused access to {url} ({status}): {detail} — a token (rigdeck hub login, or HF_TOKEN) with read access is needed")]
    Unauthorized {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("the hub asks us to slow down ({url} answered 429{})", pause_asked(*retry_after, *asked_s))]
    RateLimited {
        url: String,
        /// The pause we take: the server's ask, capped at `client::MAX_RETRY_AFTER`.
        retry_after: Option<Duration>,
        /// What the server's `Retry-After` asked for, in seconds.
        asked_s: Option<u64>,
    },
    #[error("the hub answered {status} for {url}{detail}; this is the server's side, retried with backoff")]
    Server {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("the hub answered {status} for {url}{detail}")]
    Status {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("{url} redirects in a loop ({hops} hops); refused")]
    RedirectLoop { url: String, hops: usize },
    #[error("{from} redirects to {to}, {why}; refused")]
    BadRedirect {
        from: String,
        to: String,
        why: &'static str,
    },
    #[error("the hub's answer from {url} does not parse ({detail}); nothing was changed — retry, or report it if HF_ENDPOINT names a mirror")]
    Parse { url: String, detail: String },
    #[error("the hub's answer from {url} is larger than {limit} bytes; refused")]
    TooLarge { url: String, limit: u64 },
    #[error("the hub's file listing at {url} is larger than {} or {entries} entries in total across its pages; refused (report it if HF_ENDPOINT names a mirror)", crate::download::error::human_bytes(*bytes))]
    ListingTooLarge {
        url: String,
        bytes: u64,
        entries: usize,
    },
    #[error("the hub listed {count} file(s) for {repo} and every file was refused, so nothing can be downloaded: {reasons}")]
    EveryFileRefused {
        repo: String,
        count: usize,
        reasons: String,
    },
}

impl HubError {
    /// A request that got no response headers within `deadline`.
    pub fn no_response(url: &url::Url, deadline: Duration) -> HubError {
        HubError::NoResponse {
            origin: url.origin().ascii_serialization(),
            url: super::redact::shown_url(url),
            waited: deadline,
        }
    }

    /// Whether trying again later can succeed (the network, the server's side, a rate limit).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            HubError::Network { .. }
                | HubError::Timeout { .. }
                | HubError::NoResponse { .. }
                | HubError::BodyStalled { .. }
                | HubError::RateLimited { .. }
                | HubError::Server { .. }
        )
    }

    /// How long the server asked us to wait, when it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            HubError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// "30 s", or "0.3 s" under ten seconds with a fraction (the deadlines tests set).
pub fn seconds_text(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 10.0 && duration.subsec_millis() != 0 {
        format!("{seconds:.1} s")
    } else {
        format!("{} s", duration.as_secs())
    }
}

/// ", asking for a pause of N s" (and that it was cut, when it was), or nothing.
fn pause_asked(taken: Option<Duration>, asked_s: Option<u64>) -> String {
    match (taken, asked_s) {
        (Some(taken), Some(asked)) if taken.as_secs() < asked => format!(
            ", asking for a pause of {asked} s; we wait {} at most",
            seconds_text(taken)
        ),
        (_, Some(asked)) => format!(", asking for a pause of {asked} s"),
        _ => String::new(),
    }
}
