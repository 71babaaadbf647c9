//! What can go wrong talking to the hub, each case with the thing it concerns and what to do.

use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum HubError {
    #[error("could not reach {url}: {detail}; check the network (or HF_ENDPOINT) and retry")]
    Network { url: String, detail: String },
    #[error("{url} did not answer within {seconds} s; the transfer is retried, or retry later")]
    Timeout { url: String, seconds: u64 },
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
    #[error("the hub asks us to slow down ({url}, 429); retrying after {}", retry_after.map_or("a pause".to_owned(), |d| format!("{} s", d.as_secs())))]
    RateLimited {
        url: String,
        retry_after: Option<Duration>,
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
}

impl HubError {
    /// Whether trying again later can succeed (the network, the server's side, a rate limit).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            HubError::Network { .. }
                | HubError::Timeout { .. }
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
