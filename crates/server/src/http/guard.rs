//! Request guards: the Host/Origin checks against DNS rebinding and cross-site requests,
//! the token check, and the security headers on every response.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rigdeck_core::gateway::{ErrorKind, GatewayError};

use super::error::ApiError;
use super::AppState;

/// Name of the cookie that carries the token for browsers.
pub const SESSION_COOKIE: &str = "rigdeck_session";

/// Which `Host` header values this server answers to.
///
/// An IP literal is always fine (a DNS-rebinding attack needs a name that resolves to us);
/// names are accepted only when they are `localhost` or were allowed explicitly.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    port: u16,
    names: Vec<String>,
}

impl AllowedHosts {
    pub fn new(bound: SocketAddr, extra: &[String]) -> Self {
        let names = std::iter::once("localhost".to_owned())
            .chain(extra.iter().map(|h| h.trim().to_ascii_lowercase()))
            .filter(|h| !h.is_empty())
            .collect();
        Self {
            port: bound.port(),
            names,
        }
    }

    pub fn allows(&self, host_header: &str) -> bool {
        let Some((host, port)) = split_host_port(host_header) else {
            return false;
        };
        if port.is_some_and(|p| p != self.port) {
            return false;
        }
        let host = host.to_ascii_lowercase();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        bare.parse::<IpAddr>().is_ok()
            || self
                .names
                .iter()
                .any(|n| *n == host || *n == format!("{host}:{}", self.port))
    }
}

/// Splits `host[:port]`, `[v6]` or `[v6]:port`.
fn split_host_port(value: &str) -> Option<(&str, Option<u16>)> {
    if value.starts_with('[') {
        let end = value.find(']')?;
        let (host, rest) = value.split_at(end + 1);
        return match rest.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if rest.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match value.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((value, None)),
    }
}

/// Refuses requests for a foreign `Host` (421) and requests whose `Origin` is not this server (403).
pub async fn check_host_and_origin(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let Some(host) = header_str(headers, header::HOST) else {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_host",
            "the request has no Host header",
        )
        .into_response();
    };
    if !state.allowed_hosts.allows(host) {
        let name = split_host_port(host).map_or(host, |(name, _)| name);
        let message = format!(
            "this Rigdeck does not answer to host '{host}': use its address (e.g. http://127.0.0.1:{}) or start it with --allow-host {name}",
            state.bind.port()
        );
        return ApiError::new(StatusCode::MISDIRECTED_REQUEST, "forbidden_host", message)
            .into_response();
    }
    if let Some(origin) = header_str(headers, header::ORIGIN) {
        if !origin_matches(origin, host) {
            let message = format!("requests from origin '{origin}' are not allowed: open the Rigdeck UI from its own address");
            return ApiError::new(StatusCode::FORBIDDEN, "forbidden_origin", message)
                .into_response();
        }
    }
    next.run(request).await
}

/// On the gateway's own port: a request a web page sent (it carries `Origin`) is refused, so a
/// site open in a browser on the LAN cannot use the gateway through it.
pub async fn refuse_browser_origins(request: Request, next: Next) -> Response {
    if let Some(origin) = header_str(request.headers(), header::ORIGIN) {
        let message = format!("requests from web pages ({origin}) are not accepted on the gateway's port: call it from a program");
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden_origin", message).into_response();
    }
    next.run(request).await
}

/// Same origin means scheme http(s) and exactly the host (and port) the request was sent to.
fn origin_matches(origin: &str, host: &str) -> bool {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    rest.is_some_and(|authority| authority.eq_ignore_ascii_case(host))
}

/// Lets the request through only with the token, as a bearer header or the session cookie.
pub async fn require_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let presented = bearer_token(headers).or_else(|| session_cookie(headers));
    match presented {
        Some(token) if state.token.matches(token) => next.run(request).await,
        _ => ApiError::unauthorized().into_response(),
    }
}

/// The `Authorization: Bearer` value (the admin token, or a gateway key). The scheme's name is
/// case-insensitive (RFC 9110 §11.1): `bearer` and `BEARER` are `Bearer` too.
pub(super) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let (scheme, credentials) = header_str(headers, header::AUTHORIZATION)?
        .trim_start()
        .split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// On the gateway's own port (the one other machines reach) only API keys are accepted: the
/// admin token, which controls the whole rig, is refused there even though `/v1` takes it on
/// the daemon's port (the Chat page uses it).
pub async fn refuse_admin_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = super::gateway::presented_key(request.headers());
    if presented.is_some_and(|key| state.token.matches(key)) {
        let dialect = super::gateway::dialect_of(request.uri().path());
        let message = "the admin token is not accepted on the gateway's own port: send an API key (create one on the Gateway page or with `rigdeck keys create NAME`)";
        return GatewayError::new(ErrorKind::Authentication, message).response(dialect);
    }
    next.run(request).await
}

fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
}

/// The `Set-Cookie` value that signs a browser in (or, with `None`, out).
pub fn session_cookie_header(token: Option<&str>) -> HeaderValue {
    let value = match token {
        Some(token) => {
            format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=31536000")
        }
        None => format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    };
    // The token is hex, so the header value is always valid.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name)?.to_str().ok()
}

/// No framing, no sniffing, no referrer (the login URL carries the token), scripts only from us.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
        ),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> AllowedHosts {
        AllowedHosts::new("127.0.0.1:7878".parse().unwrap(), &["rig.lan".to_owned()])
    }

    #[test]
    fn loopback_ip_literals_and_allowed_names_pass() {
        let h = hosts();
        for ok in [
            "127.0.0.1:7878",
            "localhost:7878",
            "[::1]:7878",
            "192.168.1.5:7878",
            "rig.lan:7878",
            "LOCALHOST:7878",
            "127.0.0.1",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
    }

    #[test]
    fn rebinding_names_and_other_ports_fail() {
        let h = hosts();
        for bad in [
            "evil.example:7878",
            "localhost:8080",
            "127.0.0.1:1",
            "localhost.evil.example:7878",
            "[::1",
            "",
        ] {
            assert!(!h.allows(bad), "{bad}");
        }
    }

    #[test]
    fn origin_must_be_exactly_the_host() {
        assert!(origin_matches("http://127.0.0.1:7878", "127.0.0.1:7878"));
        assert!(!origin_matches("http://evil.example", "127.0.0.1:7878"));
        assert!(!origin_matches("null", "127.0.0.1:7878"));
        assert!(!origin_matches("http://127.0.0.1:7879", "127.0.0.1:7878"));
    }

    fn authorization(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn reads_the_bearer_scheme_in_any_case() {
        for value in ["Bearer abc", "bearer abc", "BEARER abc", "Bearer   abc "] {
            assert_eq!(bearer_token(&authorization(value)), Some("abc"), "{value}");
        }
        for value in ["Basic abc", "Bearerabc", "abc", "Bearer"] {
            assert_eq!(bearer_token(&authorization(value)), None, "{value}");
        }
    }

    #[test]
    fn reads_the_session_cookie_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; rigdeck_session=abc; b=2"),
        );
        assert_eq!(session_cookie(&headers), Some("abc"));
    }
}
