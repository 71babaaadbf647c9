//! Concurrent streaming clients that time every chunk: the load of the gateway benchmark
//! (`tests/bench/gateway_vs_litellm.sh`). N streams each send M chat completions back to back
//! (`stream: true`); for every content chunk it records arrival time minus the `emit_ns` the
//! fake engine (`examples/fake_engine.rs`) wrote into it, on the same host's clock, so whatever
//! sits between the two (a gateway, a proxy) shows as added latency per chunk.
//!
//! Prints and writes (`--json`) the median and p99 chunk latency (µs), time to first token
//! (request sent to first content chunk, ms), throughput (content tokens/s over the run's wall
//! time) and the errors.
//!
//!   stream_load --url http://127.0.0.1:8080/v1/chat/completions --model fake \
//!       --streams 16 --requests-per-stream 3 --max-tokens 200 --json out.json

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use futures_util::StreamExt;
use serde_json::{json, Value};

#[derive(Debug, Clone, Parser)]
#[command(about = "Concurrent streaming chat completions, timing every chunk")]
struct Args {
    /// The chat completions URL (`http://HOST:PORT/v1/chat/completions`).
    #[arg(long)]
    url: String,
    /// The `model` field of each request.
    #[arg(long)]
    model: String,
    /// Sent as `Authorization: Bearer KEY`.
    #[arg(long)]
    key: Option<String>,
    /// Concurrent streams.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Requests each stream sends, one after another (timed).
    #[arg(long, default_value_t = 3)]
    requests_per_stream: usize,
    /// Untimed requests each stream sends first (connections, lazy imports in a proxy).
    #[arg(long, default_value_t = 1)]
    warmup_requests: usize,
    /// `max_tokens` of each request.
    #[arg(long, default_value_t = 200)]
    max_tokens: u64,
    /// The longest one request may take, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Where to write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// A name for this run in the output (`direct`, `gateway`, …).
    #[arg(long, default_value = "")]
    label: String,
}

/// What one stream measured over its requests.
#[derive(Default)]
struct Measured {
    /// Arrival minus emit time of every content chunk, in ns.
    chunk_latency_ns: Vec<i64>,
    /// Request sent to first content chunk, in ns.
    ttft_ns: Vec<u64>,
    tokens: u64,
    /// Content chunks without an `emit_ns` (a proxy that drops unknown fields).
    unstamped: u64,
    ok: u64,
    errors: Vec<String>,
}

impl Measured {
    fn merge(&mut self, other: Measured) {
        self.chunk_latency_ns.extend(other.chunk_latency_ns);
        self.ttft_ns.extend(other.ttft_ns);
        self.tokens += other.tokens;
        self.unstamped += other.unstamped;
        self.ok += other.ok;
        self.errors.extend(other.errors);
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// One streamed request; its chunks go into `into` when `timed`. Errors say what went wrong.
async fn one_request(
    client: &reqwest::Client,
    args: &Args,
    body: &str,
    timed: bool,
    into: &mut Measured,
) -> Result<(), String> {
    let sent = Instant::now();
    let mut request = client
        .post(&args.url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = &args.key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!(
            "HTTP {status}: {}",
            text.chars().take(300).collect::<String>()
        ));
    }
    let mut body = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    let mut first_token = true;
    let mut latencies = Vec::new();
    let mut tokens = 0u64;
    let mut unstamped = 0u64;
    let mut ttft = None;
    let mut done = false;
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|e| format!("reading the stream: {e}"))?;
        // One timestamp per read: every event in it arrived at this moment.
        let arrived_ns = now_ns();
        let arrived = Instant::now();
        buffer.extend_from_slice(&piece);
        while let Some((end, gap)) = event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end + gap).take(end).collect();
            let text = String::from_utf8_lossy(&event);
            for line in text.lines() {
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim();
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                let chunk: Value = serde_json::from_str(data)
                    .map_err(|e| format!("a chunk is not JSON ({e}): {data}"))?;
                if let Some(error) = chunk.get("error") {
                    return Err(format!("error event: {error}"));
                }
                let has_content = chunk["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty());
                if !has_content {
                    continue;
                }
                tokens += 1;
                if first_token {
                    first_token = false;
                    ttft = Some(arrived.duration_since(sent).as_nanos() as u64);
                }
                match chunk["emit_ns"].as_i64() {
                    Some(emitted) => latencies.push(arrived_ns - emitted),
                    None => unstamped += 1,
                }
            }
        }
    }
    if !done {
        return Err(format!(
            "the stream ended without [DONE] after {tokens} tokens"
        ));
    }
    if timed {
        into.chunk_latency_ns.extend(latencies);
        into.ttft_ns.extend(ttft);
        into.tokens += tokens;
        into.unstamped += unstamped;
        into.ok += 1;
    }
    Ok(())
}

/// Where the first SSE event in `buffer` ends, and the length of the blank line after it.
fn event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

async fn one_stream(client: reqwest::Client, args: std::sync::Arc<Args>) -> Measured {
    let body = json!({
        "model": args.model,
        "messages": [{"role": "user", "content": "Write a short story about a fox."}],
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": args.max_tokens,
    })
    .to_string();
    let mut measured = Measured::default();
    for i in 0..args.warmup_requests + args.requests_per_stream {
        let timed = i >= args.warmup_requests;
        let limit = Duration::from_secs(args.timeout_s);
        let result = tokio::time::timeout(
            limit,
            one_request(&client, &args, &body, timed, &mut measured),
        )
        .await
        .unwrap_or_else(|_| Err(format!("no end within {} s", args.timeout_s)));
        if let Err(e) = result {
            measured.errors.push(e);
        }
    }
    measured
}

/// The value at quantile `q` (nearest rank) of sorted `values`.
fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => match runtime.block_on(run(args)) {
            Ok(code) => code,
            Err(message) => {
                eprintln!("stream_load: {message}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("stream_load: cannot start the runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<std::process::ExitCode, String> {
    if args.streams == 0 || args.requests_per_stream == 0 {
        return Err("--streams and --requests-per-stream must be at least 1".to_owned());
    }
    let client = reqwest::Client::builder()
        // One idle connection per stream, so back-to-back requests reuse theirs.
        .pool_max_idle_per_host(args.streams)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let args = std::sync::Arc::new(args);

    // Warm-up first, all streams together, so the timed part starts with every connection open
    // and the proxy's lazy work done; the timed part is then one wall-clock window.
    if args.warmup_requests > 0 {
        let warm = Args {
            requests_per_stream: 0,
            ..(*args).clone()
        };
        let warm = std::sync::Arc::new(warm);
        let tasks: Vec<_> = (0..args.streams)
            .map(|_| tokio::spawn(one_stream(client.clone(), warm.clone())))
            .collect();
        for task in tasks {
            let measured = task.await.map_err(|e| format!("a stream panicked: {e}"))?;
            if let Some(e) = measured.errors.first() {
                return Err(format!("the warm-up request failed: {e}"));
            }
        }
    }
    let timed = std::sync::Arc::new(Args {
        warmup_requests: 0,
        ..(*args).clone()
    });
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.streams)
        .map(|_| tokio::spawn(one_stream(client.clone(), timed.clone())))
        .collect();
    let mut all = Measured::default();
    for task in tasks {
        all.merge(task.await.map_err(|e| format!("a stream panicked: {e}"))?);
    }
    let wall = start.elapsed().as_secs_f64();

    all.chunk_latency_ns.sort_unstable();
    all.ttft_ns.sort_unstable();
    let us = |q: f64| quantile(&all.chunk_latency_ns, q).map(|ns| ns as f64 / 1e3);
    let ms = |q: f64| quantile(&all.ttft_ns, q).map(|ns| ns as f64 / 1e6);
    let mean_us = if all.chunk_latency_ns.is_empty() {
        None
    } else {
        Some(
            all.chunk_latency_ns
                .iter()
                .map(|&ns| ns as f64)
                .sum::<f64>()
                / all.chunk_latency_ns.len() as f64
                / 1e3,
        )
    };
    let throughput = all.tokens as f64 / wall;
    let report = json!({
        "label": args.label,
        "url": args.url,
        "model": args.model,
        "streams": args.streams,
        "requests_per_stream": args.requests_per_stream,
        "max_tokens": args.max_tokens,
        "requests_ok": all.ok,
        "errors": all.errors.len(),
        "error_samples": all.errors.iter().take(5).collect::<Vec<_>>(),
        "chunks_timed": all.chunk_latency_ns.len(),
        "chunks_without_emit_ns": all.unstamped,
        "chunk_latency_us": {
            "median": us(0.5), "p90": us(0.9), "p99": us(0.99), "max": us(1.0), "mean": mean_us,
        },
        "ttft_ms": {"median": ms(0.5), "p99": ms(0.99), "max": ms(1.0)},
        "tokens": all.tokens,
        "wall_s": wall,
        "throughput_tok_s": throughput,
    });
    let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    println!(
        "{}{} streams × {} requests: chunk latency median {} µs, p99 {} µs; TTFT median {} ms; \
         {:.1} tok/s; {} ok, {} errors{}",
        if args.label.is_empty() {
            String::new()
        } else {
            format!("{}: ", args.label)
        },
        args.streams,
        args.requests_per_stream,
        show(us(0.5)),
        show(us(0.99)),
        show(ms(0.5)),
        throughput,
        all.ok,
        all.errors.len(),
        if all.unstamped > 0 {
            format!(" ({} chunks without emit_ns)", all.unstamped)
        } else {
            String::new()
        }
    );
    for e in all.errors.iter().take(3) {
        eprintln!("  error: {e}");
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| format!("cannot write the report: {e}"))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write '{}': {e}", path.display()))?;
    }
    Ok(if all.errors.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
