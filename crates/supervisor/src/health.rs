//! Readiness probe: one plain HTTP/1.1 GET against the engine's health URL, judged by status code.
//!
//! Engines listen on plain HTTP (usually loopback), and all the supervisor needs is the status
//! line, so this is a forty-line client instead of a TLS-capable HTTP stack in the core crate.
//! llama-server answers `/health` with 503 while it loads the model and 200 once it serves.

use std::io;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::SuperviseError;

/// The most of an answer read before giving up on finding its end (a health body is tiny).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A parsed `http://host:port/path` health URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthUrl {
    raw: String,
    /// Host as given in the URL, brackets kept for IPv6 (used in the `Host` header).
    authority: String,
    /// Host to connect to, brackets removed.
    host: String,
    port: u16,
    path: String,
}

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Probe {
    /// The endpoint answered 200.
    Ready,
    /// It answered, but not 200 (llama-server: 503 while loading).
    NotReady { status: u16 },
    /// Nothing listening yet, or no usable answer.
    Unreachable { reason: String },
}

impl HealthUrl {
    /// Parses a health URL; only plain `http://` is accepted.
    pub fn parse(url: &str) -> Result<Self, SuperviseError> {
        let bad = |reason: &str| SuperviseError::BadHealthUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only plain http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the path contains spaces or control characters"));
        }
        if authority.contains('@') {
            return Err(bad("user names in the URL are not supported"));
        }
        let (host, port) = split_host_port(authority).map_err(bad)?;
        if host.is_empty() {
            return Err(bad("it names no host"));
        }
        Ok(Self {
            raw: url.to_string(),
            authority: authority.to_string(),
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

/// `host:port`, `[v6]:port` or a bare host (port 80).
fn split_host_port(authority: &str) -> Result<(&str, u16), &'static str> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address lacks its closing ']'")?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => 80,
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err("the port is not a number from 1 to 65535"),
        },
    };
    Ok((host, port))
}

/// Probes once; never takes longer than `timeout`.
pub async fn probe(url: &HealthUrl, timeout: Duration) -> Probe {
    match tokio::time::timeout(timeout, get_status(url)).await {
        Ok(Ok(200)) => Probe::Ready,
        Ok(Ok(status)) => Probe::NotReady { status },
        Ok(Err(err)) => Probe::Unreachable {
            reason: err.to_string(),
        },
        Err(_) => Probe::Unreachable {
            reason: format!("no answer within {} ms", timeout.as_millis()),
        },
    }
}

async fn get_status(url: &HealthUrl) -> io::Result<u16> {
    let mut stream = TcpStream::connect((url.host.as_str(), url.port)).await?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rigdeck\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        url.path, url.authority
    );
    stream.write_all(request.as_bytes()).await?;
    // Read to the end (the server closes, as asked) so it never writes into a reset socket.
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 || answer.len() >= MAX_ANSWER_BYTES {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    parse_status(&answer).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the answer is not an HTTP response",
        )
    })
}

/// The status code from `HTTP/1.1 503 Service Unavailable\r\n…`.
fn parse_status(answer: &[u8]) -> Option<u16> {
    let line_end = answer
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(answer.len());
    let line = std::str::from_utf8(&answer[..line_end]).ok()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_urls() {
        let url = HealthUrl::parse("http://127.0.0.1:8080/health").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.path.as_str()),
            ("127.0.0.1", 8080, "/health")
        );
        let url = HealthUrl::parse("http://[::1]:9000/v1/health?x=1").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.authority.as_str()),
            ("::1", 9000, "[::1]:9000")
        );
        let url = HealthUrl::parse("http://localhost").unwrap();
        assert_eq!((url.port, url.path.as_str()), (80, "/"));
    }

    #[test]
    fn refuses_what_it_cannot_probe() {
        for url in [
            "https://127.0.0.1:8080/health",
            "127.0.0.1:8080",
            "http://:8080/health",
            "http://127.0.0.1:0/health",
            "http://127.0.0.1:99999/health",
            "http://127.0.0.1:80/he alth",
            "http://[::1:80/",
            "http://user@127.0.0.1/",
        ] {
            let err = HealthUrl::parse(url).unwrap_err().to_string();
            assert!(
                err.contains(url) && err.contains("http://127.0.0.1:8080/health"),
                "{err}"
            );
        }
    }

    #[test]
    fn reads_the_status_code() {
        assert_eq!(
            parse_status(b"HTTP/1.1 503 Service Unavailable\r\n\r\n{}"),
            Some(503)
        );
        assert_eq!(parse_status(b"HTTP/1.0 200 OK\r\n"), Some(200));
        assert_eq!(parse_status(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status(b""), None);
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable() {
        // Bind then drop to get a port that is very likely closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = HealthUrl::parse(&format!("http://127.0.0.1:{port}/health")).unwrap();
        assert!(matches!(
            probe(&url, Duration::from_secs(2)).await,
            Probe::Unreachable { .. }
        ));
    }
}
