//! A loopback HTTP server scripted request by request, for the hubs the fake hub cannot play:
//! one that accepts a connection and never answers, one that sends headers and then nothing,
//! one that answers with whatever bytes a test writes.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
pub enum Reply {
    /// Keeps the connection open without sending a byte, until the client goes away.
    Silence,
    /// Sends these bytes (a whole answer, headers and body), then closes.
    Bytes(Vec<u8>),
    /// Sends these bytes (headers, maybe part of a body), then holds the connection silently.
    ThenSilence(Vec<u8>),
}

/// An answer's bytes: status line, the headers given plus `content-length` and
/// `connection: close`, and the body.
pub fn answer(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Headers announcing `length` bytes of body, without the body.
pub fn headers_only(status: &str, headers: &[(&str, String)], length: u64) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {length}\r\n\r\n"));
    head.into_bytes()
}

pub struct RawServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Each request's first line (`GET /path HTTP/1.1`), in arrival order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

type Script = dyn Fn(&str) -> Reply + Send + Sync;

impl RawServer {
    /// Serves every request by `script`, given the request line.
    pub async fn start(script: impl Fn(&str) -> Reply + Send + Sync + 'static) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, script.clone(), seen.clone()));
            }
        });
        RawServer { url, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("requests").clone()
    }
}

async fn serve(mut stream: TcpStream, script: Arc<Script>, seen: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next().unwrap_or_default().to_owned();
    seen.lock().expect("requests").push(line.clone());
    match script(&line) {
        Reply::Silence => hold(stream).await,
        Reply::Bytes(bytes) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
        }
        Reply::ThenSilence(bytes) => {
            let _ = stream.write_all(&bytes).await;
            hold(stream).await;
        }
    }
}

/// Reads (and drops) until the client closes the connection.
async fn hold(mut stream: TcpStream) {
    let mut buffer = [0u8; 1024];
    while let Ok(n) = stream.read(&mut buffer).await {
        if n == 0 {
            return;
        }
    }
}
