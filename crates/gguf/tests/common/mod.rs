//! Shared by the integration tests and the benchmark: a tiny HTTP/1.1 file server that
//! honours (or, on request, ignores) `Range`, counts requests and bytes sent, and a writer
//! that uses every metadata type.
#![allow(dead_code)]

use rigdeck_gguf::{Array, GgmlType, GgufWriter, StringArray, TensorData, Value};
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A file server over a folder, for one test.
pub struct TestServer {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicU64>,
    pub body_bytes_sent: Arc<AtomicU64>,
}

impl TestServer {
    /// Serves `dir` on 127.0.0.1; with `ignore_range` it answers 200 with the whole file.
    pub async fn start(dir: &Path, ignore_range: bool) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let body_bytes_sent = Arc::new(AtomicU64::new(0));
        let (dir, req, sent) = (dir.to_path_buf(), requests.clone(), body_bytes_sent.clone());
        let ignore = Arc::new(AtomicBool::new(ignore_range));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (dir, req, sent, ignore) =
                    (dir.clone(), req.clone(), sent.clone(), ignore.clone());
                tokio::spawn(async move {
                    req.fetch_add(1, Ordering::SeqCst);
                    let _ = serve_one(stream, &dir, ignore.load(Ordering::SeqCst), &sent).await;
                });
            }
        });
        TestServer {
            addr,
            requests,
            body_bytes_sent,
        }
    }

    pub fn url(&self, file: &str) -> String {
        format!("http://{}/{file}", self.addr)
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn serve_one(
    mut stream: TcpStream,
    dir: &Path,
    ignore_range: bool,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    let head = read_head(&mut stream).await?;
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/");
    let path = path.split('?').next().unwrap_or("").trim_start_matches('/');
    let range = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("range"))
        .and_then(|(_, v)| parse_range(v.trim()));
    let file_path: PathBuf = dir.join(path);
    if path.contains("..") || !file_path.is_file() {
        let msg = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        return stream.write_all(msg.as_bytes()).await;
    }
    let total = std::fs::metadata(&file_path)?.len();
    match range {
        Some((start, _)) if !ignore_range && start >= total => {
            let msg = format!(
                "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{total}\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(msg.as_bytes()).await
        }
        Some((start, end)) if !ignore_range => {
            let end = end.min(total - 1);
            let len = end - start + 1;
            let msg = format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{end}/{total}\r\n\
                 Content-Length: {len}\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(msg.as_bytes()).await?;
            send_file_part(&mut stream, &file_path, start, len, sent).await
        }
        _ => {
            let msg =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n");
            stream.write_all(msg.as_bytes()).await?;
            send_file_part(&mut stream, &file_path, 0, total, sent).await
        }
    }
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16384 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// `bytes=a-b` (or `bytes=a-`) → (a, b).
fn parse_range(v: &str) -> Option<(u64, u64)> {
    let spec = v.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    Some((a.parse().ok()?, b.parse().unwrap_or(u64::MAX)))
}

/// Streams a part of a file in 64 KiB chunks, counting what the socket accepted.
async fn send_file_part(
    stream: &mut TcpStream,
    path: &Path,
    start: u64,
    len: u64,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    let mut left = len;
    let mut buf = vec![0u8; 64 << 10];
    while left > 0 {
        let n = (left.min(buf.len() as u64)) as usize;
        file.read_exact(&mut buf[..n])?;
        stream.write_all(&buf[..n]).await?;
        sent.fetch_add(n as u64, Ordering::SeqCst);
        left -= n as u64;
    }
    stream.flush().await
}

/// A writer with one key of every value type (nested arrays too) and tensors of several types
/// with supplied, random and zero data.
pub fn every_type_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama")
        .set("general.name", "every type")
        .set("t.u8", 200u8)
        .set("t.i8", -100i8)
        .set("t.u16", 60_000u16)
        .set("t.i16", -30_000i16)
        .set("t.u32", 4_000_000_000u32)
        .set("t.i32", -2_000_000_000i32)
        .set("t.f32", 1.5f32)
        .set("t.bool", true)
        .set("t.string", "héllo wörld")
        .set("t.empty_string", "")
        .set("t.u64", u64::MAX)
        .set("t.i64", i64::MIN)
        .set("t.f64", -2.25f64)
        .set("t.arr.u8", vec![1u8, 2, 3])
        .set("t.arr.i8", vec![-1i8, 0, 1])
        .set("t.arr.u16", vec![1u16, 65535])
        .set("t.arr.i16", vec![-2i16, 2])
        .set("t.arr.u32", vec![7u32; 5])
        .set("t.arr.i32", vec![-7i32, 7])
        .set("t.arr.f32", vec![0.5f32, -0.25])
        .set("t.arr.bool", vec![true, false, true])
        .set("t.arr.str", vec!["a", "", "ç"])
        .set("t.arr.u64", vec![u64::MAX, 0])
        .set("t.arr.i64", vec![i64::MIN, i64::MAX])
        .set("t.arr.f64", vec![1e300f64])
        .set("t.arr.empty", Value::Array(Array::U32(vec![])))
        .set(
            "t.arr.nested",
            Value::Array(Array::Array(vec![
                Array::U32(vec![1, 2]),
                Array::String(["x", "y"].into_iter().collect::<StringArray>()),
                Array::Array(vec![Array::Bool(vec![true])]),
            ])),
        )
        .set("llama.block_count", 2u32)
        .set("llama.context_length", 4096u32)
        .set("llama.embedding_length", 256u32)
        .set("llama.attention.head_count", 4u32)
        .set("llama.attention.head_count_kv", vec![2i32, 4])
        .set("tokenizer.ggml.tokens", vec!["<s>", "</s>", "a", "b"]);
    w.add_tensor(
        "token_embd.weight",
        &[256, 4],
        GgmlType::Q8_0,
        TensorData::Random { seed: 1 },
    )
    .add_tensor(
        "blk.0.attn_norm.weight",
        &[256],
        GgmlType::F32,
        TensorData::Bytes(vec![7u8; 1024]),
    )
    .add_tensor(
        "blk.0.attn_q.weight",
        &[256, 256],
        GgmlType::Q4_K,
        TensorData::Zeros,
    )
    .add_tensor(
        "blk.1.attn_q.weight",
        &[256, 256],
        GgmlType::IQ2_XXS,
        TensorData::Random { seed: 2 },
    )
    .add_tensor(
        "output.weight",
        &[256, 4],
        GgmlType::BF16,
        TensorData::Zeros,
    )
    .add_tensor("scalar", &[], GgmlType::F32, TensorData::Zeros)
    .add_tensor("empty", &[0, 3], GgmlType::Q4_0, TensorData::Zeros);
    w
}
