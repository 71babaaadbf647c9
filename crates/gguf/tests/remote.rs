//! Remote header reads against a local HTTP server, counting requests.
#![cfg(feature = "remote")]

mod common;

use common::TestServer;
use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::remote::HttpReader;
use rigdeck_gguf::remote::{self, RangeBytes, RangeSource, FIRST_REQUEST_BYTES};
use rigdeck_gguf::{
    ErrorKind, GgmlType, GgufError, GgufFile, GgufModel, GgufWriter, StringArray, TensorData,
};
use std::sync::Mutex;

/// A writer whose header is about `mib` MiB (a vocabulary of 10-byte tokens).
fn header_of_mib(mib: usize) -> GgufWriter {
    let n = mib * (1 << 20) / 18;
    let tokens: StringArray = (0..n).map(|i| format!("tok{i:07}")).collect();
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama")
        .set("tokenizer.ggml.tokens", tokens)
        .add_tensor("w", &[256, 256], GgmlType::Q4_K, TensorData::Zeros);
    w
}

#[tokio::test]
async fn a_typical_header_takes_one_request() {
    let dir = tempfile::tempdir().unwrap();
    let w = common::every_type_writer();
    w.write_to_path(dir.path().join("m.gguf")).unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let reader = HttpReader::new();
    let remote = reader.read_header(&server.url("m.gguf")).await.unwrap();
    let local = GgufFile::open(dir.path().join("m.gguf")).unwrap();
    assert_eq!(remote.metadata, local.metadata);
    assert_eq!(remote.tensors, local.tensors);
    assert_eq!(remote.file_size, local.file_size);
    assert_eq!(reader.requests(), 1);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_large_header_takes_two_requests() {
    let dir = tempfile::tempdir().unwrap();
    let w = header_of_mib(5);
    assert!(w.header_bytes().unwrap().len() as u64 > 2 * FIRST_REQUEST_BYTES);
    w.write_to_path(dir.path().join("big.gguf")).unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let reader = HttpReader::new();
    let file = reader.read_header(&server.url("big.gguf")).await.unwrap();
    assert_eq!(file.tensors.len(), 1);
    assert_eq!(reader.requests(), 2);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_split_model_takes_one_request_per_part() {
    let dir = tempfile::tempdir().unwrap();
    MoeShape::small()
        .writer()
        .write_split(dir.path(), "tiny", 3)
        .unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let reader = HttpReader::new();
    let url = server.url("tiny-00002-of-00003.gguf?download=true");
    let model = reader.read_model(&url).await.unwrap();
    let local = GgufModel::open(dir.path().join("tiny-00001-of-00003.gguf")).unwrap();
    assert_eq!(model.tensors, local.tensors);
    assert_eq!(model.metadata, local.metadata);
    assert_eq!(model.file_size(), local.file_size());
    assert_eq!(reader.requests(), 3);
    assert!(model.shards[0]
        .name
        .ends_with("tiny-00001-of-00003.gguf?download=true"));
}

#[tokio::test]
async fn a_missing_remote_part_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let paths = MoeShape::small()
        .writer()
        .write_split(dir.path(), "tiny", 3)
        .unwrap();
    std::fs::remove_file(&paths[2]).unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let e = HttpReader::new()
        .read_model(&server.url("tiny-00001-of-00003.gguf"))
        .await
        .unwrap_err();
    assert!(matches!(e.kind, ErrorKind::HttpStatus { status: 404 }));
    let msg = e.to_string();
    assert!(
        msg.contains("/tiny-00003-of-00003.gguf' was not found (HTTP 404)"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_server_that_ignores_range_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    // 8 GiB of (sparse) weights behind a small header.
    let mut w = GgufWriter::new();
    w.add_tensor("w", &[1 << 16, 1 << 16], GgmlType::F16, TensorData::Zeros);
    w.write_to_path(dir.path().join("huge.gguf")).unwrap();
    let server = TestServer::start(dir.path(), true).await;
    let reader = HttpReader::new();
    let started = std::time::Instant::now();
    let e = reader
        .read_header(&server.url("huge.gguf"))
        .await
        .unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::RangeIgnored { status: 200, .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("the server ignores Range requests, so Rigdeck stopped"),
        "{e}"
    );
    assert_eq!(reader.requests(), 1);
    // Give the server a moment to notice the closed connection, then check how much it sent.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let sent = server
        .body_bytes_sent
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(sent < 64 << 20, "the server sent {sent} bytes");
    assert!(started.elapsed().as_secs() < 10);
}

#[tokio::test]
async fn a_small_file_from_a_server_that_ignores_range_is_fine() {
    let dir = tempfile::tempdir().unwrap();
    common::every_type_writer()
        .write_to_path(dir.path().join("m.gguf"))
        .unwrap();
    let server = TestServer::start(dir.path(), true).await;
    let reader = HttpReader::new();
    let file = reader.read_header(&server.url("m.gguf")).await.unwrap();
    assert_eq!(file.tensors.len(), 7);
    assert_eq!(reader.requests(), 1);
}

#[tokio::test]
async fn a_truncated_remote_file_is_an_error_not_a_loop() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = header_of_mib(3).to_bytes().unwrap();
    std::fs::write(dir.path().join("cut.gguf"), &bytes[..(3 << 20) - 100]).unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let reader = HttpReader::new();
    let e = reader
        .read_header(&server.url("cut.gguf"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is truncated at byte"), "{e}");
    assert!(e.file.unwrap().starts_with("http://"));
    assert_eq!(reader.requests(), 2);
}

#[tokio::test]
async fn a_refused_connection_is_a_network_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/m.gguf", listener.local_addr().unwrap());
    drop(listener);
    let e = HttpReader::new().read_header(&url).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Network { .. }), "{e}");
    assert!(e.to_string().contains("could not be fetched"), "{e}");
}

/// An in-memory source that records the ranges asked for.
struct Recording {
    bytes: Vec<u8>,
    asked: Mutex<Vec<(u64, u64)>>,
}

impl RangeSource for Recording {
    fn name(&self) -> &str {
        "mem.gguf"
    }

    async fn read_range(&self, start: u64, len: u64) -> Result<RangeBytes, GgufError> {
        self.asked.lock().unwrap().push((start, len));
        let s = (start as usize).min(self.bytes.len());
        let e = (s + len as usize).min(self.bytes.len());
        Ok(RangeBytes {
            bytes: self.bytes[s..e].to_vec(),
            total_size: Some(self.bytes.len() as u64),
        })
    }
}

#[tokio::test]
async fn chunks_start_at_2_mib_and_at_least_double() {
    let bytes = header_of_mib(20).to_bytes().unwrap();
    let source = Recording {
        bytes,
        asked: Mutex::new(Vec::new()),
    };
    let file = remote::read_header(&source).await.unwrap();
    assert_eq!(file.tensors.len(), 1);
    let asked = source.asked.lock().unwrap().clone();
    assert_eq!(asked[0], (0, FIRST_REQUEST_BYTES));
    for pair in asked.windows(2) {
        assert_eq!(pair[1].0, pair[0].0 + pair[0].1, "contiguous: {asked:?}");
        assert!(
            pair[1].1 >= 2 * pair[0].1 || pair[1].0 + pair[1].1 >= source.bytes.len() as u64,
            "{asked:?}"
        );
    }
    // The token array's progress told the reader how far to go: two requests, not four.
    assert_eq!(asked.len(), 2, "{asked:?}");
}

/// A source that never returns more than 100 KiB per request, like a CDN capping ranges.
struct Capped(Vec<u8>);

impl RangeSource for Capped {
    fn name(&self) -> &str {
        "capped.gguf"
    }

    async fn read_range(&self, start: u64, len: u64) -> Result<RangeBytes, GgufError> {
        let s = (start as usize).min(self.0.len());
        let e = (s + (len as usize).min(100 << 10)).min(self.0.len());
        Ok(RangeBytes {
            bytes: self.0[s..e].to_vec(),
            total_size: Some(self.0.len() as u64),
        })
    }
}

#[tokio::test]
async fn a_server_that_caps_range_lengths_is_asked_again() {
    let bytes = header_of_mib(1).to_bytes().unwrap();
    let file = remote::read_header(&Capped(bytes)).await.unwrap();
    assert_eq!(file.tensors.len(), 1);
}

#[tokio::test]
async fn a_url_promising_thousands_of_parts_sends_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let reader = HttpReader::new();
    let e = reader
        .read_model(&server.url("x-00001-of-65535.gguf"))
        .await
        .unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::TooManyParts { count: 65535, .. }),
        "{e}"
    );
    assert_eq!(reader.requests(), 0);
    assert!(e.to_string().contains("stops at 512 parts"), "{e}");
}

#[tokio::test]
async fn a_first_part_that_disagrees_with_its_name_stops_the_read() {
    let dir = tempfile::tempdir().unwrap();
    let paths = MoeShape::small()
        .writer()
        .write_split(dir.path(), "tiny", 3)
        .unwrap();
    // The same first part served under a name promising 400 parts.
    std::fs::copy(&paths[0], dir.path().join("tiny-00001-of-00400.gguf")).unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let reader = HttpReader::new();
    let e = reader
        .read_model(&server.url("tiny-00001-of-00400.gguf"))
        .await
        .unwrap_err();
    assert!(matches!(e.kind, ErrorKind::SplitMismatch { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("its name promises 400 parts, but its header says split.count 3"),
        "{e}"
    );
    assert_eq!(reader.requests(), 1, "only the first part was read");
}

/// A server that answers every request with `206` and a 2 MiB body, then sends one byte every
/// `every` (or nothing at all, if `every` is `None`).
async fn trickling_server(every: Option<std::time::Duration>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let Some(every) = every else {
                    // Silent: hold the connection open and say nothing.
                    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                    return;
                };
                let head =
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-2097151/9999999\r\n\
                            Content-Length: 2097152\r\n\r\nGGUF";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(every).await;
                    if stream.write_all(&[0]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/m.gguf")
}

fn quick_limits() -> remote::Limits {
    remote::Limits {
        connect: std::time::Duration::from_secs(2),
        idle: std::time::Duration::from_millis(500),
        request_base: std::time::Duration::from_millis(500),
        min_bytes_per_s: 1 << 20,
        budget_bytes: 1 << 30,
    }
}

#[tokio::test]
async fn a_server_that_trickles_bytes_is_cut_off() {
    let url = trickling_server(Some(std::time::Duration::from_millis(20))).await;
    let started = std::time::Instant::now();
    let e = HttpReader::with_limits(quick_limits())
        .read_header(&url)
        .await
        .unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Network { .. }), "{e}");
    assert!(
        e.to_string().contains("the server sent too little in 2 s"),
        "{e}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[tokio::test]
async fn a_server_that_never_answers_is_cut_off() {
    let url = trickling_server(None).await;
    let e = HttpReader::with_limits(quick_limits())
        .read_header(&url)
        .await
        .unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Network { .. }), "{e}");
    assert!(e.to_string().contains("could not be fetched"), "{e}");
}

#[tokio::test]
async fn a_header_larger_than_the_byte_budget_stops_the_read() {
    let dir = tempfile::tempdir().unwrap();
    header_of_mib(5)
        .write_to_path(dir.path().join("big.gguf"))
        .unwrap();
    let server = TestServer::start(dir.path(), false).await;
    let limits = remote::Limits {
        budget_bytes: 3 << 20,
        ..remote::Limits::default()
    };
    let e = HttpReader::with_limits(limits)
        .read_header(&server.url("big.gguf"))
        .await
        .unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::ByteBudgetExceeded { budget } if budget == 3 << 20),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("needs more than 3 MiB for its headers"),
        "{e}"
    );
}
