//! The truth server: an in-process streaming OpenAI-style engine whose timings are known, so the
//! benchmark harness can be checked against what was really sent.
//!
//! It runs on its own thread with its own tokio runtime (the harness under test does not share a
//! scheduler with it), bound to `127.0.0.1:0`. `POST /v1/chat/completions` and
//! `POST /v1/completions` stream SSE the way vLLM and llama.cpp do: a role-only opening chunk at
//! once, the first text chunk after the configured TTFT, then one text chunk per token at the
//! configured inter-token interval with seeded jitter (each emission scheduled against an
//! absolute deadline, so jitter does not accumulate), a `finish_reason` chunk, a usage chunk and
//! `data: [DONE]` — the last three in the same write as the last token, so the client's last
//! byte is the last token's. Lengths cycle through a range (`max_tokens` caps them). `POST
//! /tokenize` counts whitespace-separated words, llama.cpp style, so prompts come out exact;
//! `GET /metrics` answers with no counters and records when it answered. Sockets are
//! TCP_NODELAY, as engines' are.
//!
//! For every request it records the truth ([`Truth`]): when the request reached the handler and
//! the instant each text chunk was handed to the connection (taken right before it is written).
//! [`Fault`]s make chosen requests fail: HTTP 500 with an OpenAI error body, an error event, a
//! malformed chunk, or a connection closed mid-stream. [`pair`] matches the harness's samples
//! with the truths and [`compare`] sets their percentiles side by side.
//!
//! The tests include it as `mod support;`; the throughput example includes this file by path.

// Each test binary and the example use a different part of it.
#![allow(dead_code)]

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rigdeck_bench::{Endpoint, EngineKind, RunResult, Stats, StepSummary};
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// The model name the server answers as.
pub const MODEL: &str = "truth";

/// A way to make one request fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 500 with an OpenAI error body, before any streaming.
    Refuse,
    /// After this many text chunks, an `{"error": …}` event and `[DONE]` (vLLM's mid-stream error).
    ErrorEvent { after: u32 },
    /// After this many text chunks, a `data:` line that is not JSON; the stream then goes on.
    Malformed { after: u32 },
    /// After this many text chunks, the connection is closed without ending the body.
    Close { after: u32 },
}

impl Fault {
    /// The text chunks sent before the fault shows.
    fn after(self) -> Option<u32> {
        match self {
            Fault::Refuse => None,
            Fault::ErrorEvent { after } | Fault::Malformed { after } | Fault::Close { after } => {
                Some(after)
            }
        }
    }
}

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Request arrival to the first text chunk.
    pub ttft: Duration,
    /// Uniform jitter on the TTFT, a fraction (0.1 = ±10 %).
    pub ttft_jitter: f64,
    /// The mean gap between text chunks.
    pub itl: Duration,
    /// Uniform jitter on each gap, a fraction from 0 to 1 (0.25 = ±25 %).
    pub itl_jitter: f64,
    /// Tokens per answer: request `i` gets the range's `i`-th value, cycling, so requests in a
    /// row have distinct lengths (up to the range's size) and a test can pair the harness's
    /// samples with their truths by length; `max_tokens` caps it.
    pub tokens: RangeInclusive<u32>,
    /// Seeds each request's draws (with the request's index).
    pub seed: u64,
    /// The fault, if any, for the request with this index (0 is the first to arrive).
    pub fault: fn(u64) -> Option<Fault>,
    /// Worker threads of the server's runtime; 1 is a current-thread runtime.
    pub threads: usize,
    /// How long after `[DONE]` the body ends (the chunked terminator), for engines that write it
    /// separately; zero writes it with `[DONE]`.
    pub end_delay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ttft: Duration::from_millis(40),
            ttft_jitter: 0.1,
            itl: Duration::from_millis(8),
            itl_jitter: 0.25,
            tokens: 64..=128,
            seed: 7,
            fault: |_| None,
            threads: 1,
            end_delay: Duration::ZERO,
        }
    }
}

/// What the server really did for one request.
#[derive(Debug, Clone)]
pub struct Truth {
    /// Arrival order, from 0.
    pub index: u64,
    /// When the handler started (the request's headers were read).
    pub arrived: Instant,
    /// When each text chunk was handed to the connection, in order.
    pub texts: Vec<Instant>,
    /// When each text chunk was due: the server's lateness (`texts[i] − due[i]`, at least the
    /// timer's millisecond rounding) gauges how loaded the machine is.
    pub due: Vec<Instant>,
    /// The tokens the answer was to have (`usage.completion_tokens` when it completes).
    pub tokens: u32,
    pub prompt_tokens: u64,
    /// The stream reached `[DONE]` without a fault.
    pub completed: bool,
    pub fault: Option<Fault>,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl Truth {
    /// Arrival to the first text chunk.
    pub fn ttft_ms(&self) -> Option<f64> {
        self.texts
            .first()
            .map(|t| ms(t.duration_since(self.arrived)))
    }

    /// Gaps between consecutive text chunks.
    pub fn itl_ms(&self) -> impl Iterator<Item = f64> + '_ {
        self.texts.windows(2).map(|w| ms(w[1].duration_since(w[0])))
    }

    /// How late each text chunk was written, after its deadline.
    pub fn lateness_ms(&self) -> impl Iterator<Item = f64> + '_ {
        self.texts
            .iter()
            .zip(&self.due)
            .map(|(t, d)| ms(t.saturating_duration_since(*d)))
    }

    /// (last text − first text) / (tokens − 1), as the harness computes TPOT from its E2E.
    pub fn tpot_ms(&self) -> Option<f64> {
        let (first, last) = (self.texts.first()?, self.texts.last()?);
        (self.tokens > 1).then(|| ms(last.duration_since(*first)) / f64::from(self.tokens - 1))
    }
}

/// A running truth server; dropping it stops it.
pub struct TruthServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TruthServer {
    /// Starts a server on its own thread and runtime.
    pub fn start(config: Config) -> TruthServer {
        let shared = Arc::new(Shared::new(config));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (shutdown, stop) = oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("truth-server".into())
            .spawn(move || serve(state, addr_tx, stop))
            .expect("a thread for the truth server");
        let addr = addr_rx
            .recv()
            .expect("the truth server reports its address once bound");
        TruthServer {
            addr,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, the engine's root (`/tokenize`).
    pub fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An endpoint for the harness: `ROOT/v1`, llama.cpp-style, with its tokenizer at the root.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            base_url: format!("{}/v1", self.root()),
            api_key: None,
            model: MODEL.into(),
            engine: EngineKind::LlamaCpp,
            engine_url: Some(self.root()),
            engine_key: None,
        }
    }

    /// Every finished request's truth (completed, failed or abandoned), in arrival order. A
    /// stream still being written is not here yet.
    pub fn truths(&self) -> Vec<Truth> {
        let mut truths = self
            .shared
            .truths
            .lock()
            .expect("the truth list is never poisoned")
            .clone();
        truths.sort_by_key(|t| t.index);
        truths
    }

    /// Completion requests received so far.
    pub fn requests(&self) -> u64 {
        self.shared.next.load(Ordering::SeqCst)
    }

    /// Text chunks written so far, across every stream.
    pub fn texts_written(&self) -> u64 {
        self.shared.texts_written.load(Ordering::SeqCst)
    }

    /// Connections accepted so far (a client that reuses its connections opens few).
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// When each `GET /metrics` was answered. The harness reads the engine's counters right
    /// before it starts a run's clock, so the last answer before a run's first request is a
    /// lower bound of the run's start, close to it (see [`pair`]).
    pub fn scrapes(&self) -> Vec<Instant> {
        self.shared
            .scrapes
            .lock()
            .expect("the scrape list is never poisoned")
            .clone()
    }

    /// Forgets the truths recorded so far (request indices go on counting).
    pub fn clear(&self) {
        self.shared
            .truths
            .lock()
            .expect("the truth list is never poisoned")
            .clear();
    }
}

impl Drop for TruthServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            // The server may already be gone (its thread panicked); then there is nothing to stop.
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() && !std::thread::panicking() {
                panic!("the truth server's thread panicked");
            }
        }
    }
}

/// The server thread: its own runtime, serving until told to stop (open streams are dropped).
fn serve(
    shared: Arc<Shared>,
    addr_tx: std::sync::mpsc::Sender<SocketAddr>,
    stop: oneshot::Receiver<()>,
) {
    let runtime = if shared.config.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(shared.config.threads)
            .thread_name("truth-server")
            .enable_all()
            .build()
    }
    .expect("a tokio runtime for the truth server");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the truth server");
        let addr = listener
            .local_addr()
            .expect("the bound listener has an address");
        addr_tx
            .send(addr)
            .expect("the starter waits for the address");
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/completions", post(completions))
            .route("/tokenize", post(tokenize))
            .route("/metrics", get(metrics))
            .with_state(shared.clone());
        // Without TCP_NODELAY the first text chunk waits behind the role chunk's delayed ACK
        // (Nagle), up to ~40 ms on Linux: the truth would be the kernel's, not ours.
        let counted = shared.clone();
        let listener = listener.tap_io(move |tcp| {
            tcp.set_nodelay(true)
                .expect("TCP_NODELAY on a loopback socket");
            counted.connections.fetch_add(1, Ordering::SeqCst);
        });
        let server = axum::serve(listener, app).into_future();
        tokio::select! {
            served = server => served.expect("the truth server serves until stopped"),
            _ = stop => {}
        }
    });
}

/// Which route a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Completions,
}

/// State shared by the server's handlers and the test.
struct Shared {
    config: Config,
    truths: Mutex<Vec<Truth>>,
    next: AtomicU64,
    texts_written: AtomicU64,
    connections: AtomicU64,
    scrapes: Mutex<Vec<Instant>>,
    chat: Chunks,
    completions: Chunks,
}

impl Shared {
    fn new(config: Config) -> Self {
        Shared {
            config,
            truths: Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
            texts_written: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            scrapes: Mutex::new(Vec::new()),
            chat: Chunks::new(Api::Chat),
            completions: Chunks::new(Api::Completions),
        }
    }

    fn record(&self, truth: Truth) {
        self.truths
            .lock()
            .expect("the truth list is never poisoned")
            .push(truth);
    }
}

/// Words the "model" says, one per token, in turn.
const WORDS: [&str; 8] = [
    " the", " quick", " brown", " fox", " jumps", " over", " a", " dog",
];

/// Pre-built SSE events (the size of vLLM's), so writing a token costs no formatting.
struct Chunks {
    api: Api,
    opening: Bytes,
    words: Vec<Bytes>,
}

impl Chunks {
    fn new(api: Api) -> Self {
        let opening = match api {
            Api::Chat => event(&chunk(
                api,
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            )),
            Api::Completions => event(&chunk(api, json!(""), Value::Null)),
        };
        let words = WORDS
            .iter()
            .map(|w| match api {
                Api::Chat => event(&chunk(api, json!({"content": w}), Value::Null)),
                Api::Completions => event(&chunk(api, json!(w), Value::Null)),
            })
            .collect();
        Chunks {
            api,
            opening,
            words,
        }
    }

    /// The finish chunk, the usage chunk and `[DONE]`.
    fn tail(&self, finish: &str, prompt_tokens: u64, tokens: u32) -> Vec<u8> {
        let mut tail = match self.api {
            Api::Chat => event(&chunk(self.api, json!({}), json!(finish))),
            Api::Completions => event(&chunk(self.api, json!(""), json!(finish))),
        }
        .to_vec();
        let mut usage = chunk(self.api, Value::Null, Value::Null);
        usage["choices"] = json!([]);
        usage["usage"] = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": prompt_tokens + u64::from(tokens),
        });
        tail.extend_from_slice(&event(&usage));
        tail.extend_from_slice(b"data: [DONE]\n\n");
        tail
    }
}

/// One streamed chunk's JSON: `delta` for chat, `text` for completions.
fn chunk(api: Api, content: Value, finish: Value) -> Value {
    let (id, object, choice) = match api {
        Api::Chat => (
            "chatcmpl-truth",
            "chat.completion.chunk",
            json!({"index": 0, "delta": content, "logprobs": null, "finish_reason": finish}),
        ),
        Api::Completions => (
            "cmpl-truth",
            "text_completion",
            json!({"index": 0, "text": content, "logprobs": null, "finish_reason": finish}),
        ),
    };
    json!({"id": id, "object": object, "created": 1_700_000_000, "model": MODEL, "choices": [choice]})
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

async fn chat(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    complete(shared, Api::Chat, request).await
}

async fn completions(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    complete(shared, Api::Completions, request).await
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

/// The prompt's words: a completion's `prompt`, or every chat message's text content.
fn prompt_words(body: &Value) -> u64 {
    if let Some(prompt) = body.get("prompt").and_then(Value::as_str) {
        return words(prompt);
    }
    let messages = body.get("messages").and_then(Value::as_array);
    messages
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(words)
        .sum()
}

fn error_response(status: StatusCode, message: String) -> Response {
    let body =
        json!({"error": {"message": message, "type": "server_error", "code": status.as_u16()}});
    (status, Json(body)).into_response()
}

/// `base` with uniform jitter of ±`fraction`.
fn jittered(base: Duration, fraction: f64, rng: &mut StdRng) -> Duration {
    let fraction = fraction.clamp(0.0, 1.0);
    if fraction == 0.0 {
        return base;
    }
    base.mul_f64(1.0 + rng.random_range(-fraction..=fraction))
}

async fn complete(shared: Arc<Shared>, api: Api, request: Request) -> Response {
    let arrived = Instant::now();
    let index = shared.next.fetch_add(1, Ordering::SeqCst);
    let body = match axum::body::to_bytes(request.into_body(), 64 << 20).await {
        Ok(body) => body,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {e}"),
            )
        }
    };
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                format!("the body is not JSON: {e}"),
            )
        }
    };
    let config = &shared.config;
    let mut rng = StdRng::seed_from_u64(config.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (low, high) = (
        *config.tokens.start(),
        (*config.tokens.end()).max(*config.tokens.start()),
    );
    let drawn = low + (index % u64::from(high - low + 1)) as u32;
    let max_tokens = body
        .get("max_tokens")
        .or_else(|| body.get("max_completion_tokens"))
        .and_then(Value::as_u64);
    let tokens = max_tokens
        .map_or(drawn, |m| drawn.min(u32::try_from(m).unwrap_or(u32::MAX)))
        .max(1);
    let finish = if max_tokens == Some(u64::from(tokens)) {
        "length"
    } else {
        "stop"
    };
    let fault = (config.fault)(index);
    let truth = Truth {
        index,
        arrived,
        texts: Vec::with_capacity(tokens as usize),
        due: Vec::with_capacity(tokens as usize),
        tokens,
        prompt_tokens: prompt_words(&body),
        completed: false,
        fault,
    };
    if fault == Some(Fault::Refuse) {
        shared.record(truth);
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the truth server refused request {index} on purpose"),
        );
    }
    let first = arrived + jittered(config.ttft, config.ttft_jitter, &mut rng);
    let emitter = Emitter {
        shared: shared.clone(),
        api,
        rng,
        deadline: first,
        phase: Phase::Opening,
        finish,
        fault_shown: false,
        truth: Some(truth),
    };
    let stream = futures_util::stream::unfold(emitter, |mut emitter| async move {
        let next = emitter.next().await?;
        Some((next, emitter))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("a streamed response from valid parts")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Opening,
    Text,
    Done,
}

/// Writes one answer's events on schedule and records the truth; whatever way the stream ends
/// (finished, faulted, or dropped when the client went away), the truth is kept.
struct Emitter {
    shared: Arc<Shared>,
    api: Api,
    rng: StdRng,
    /// When the next text chunk is due.
    deadline: Instant,
    phase: Phase,
    finish: &'static str,
    /// The request's fault has been written (a malformed chunk goes out once).
    fault_shown: bool,
    truth: Option<Truth>,
}

impl Drop for Emitter {
    fn drop(&mut self) {
        if let Some(truth) = self.truth.take() {
            self.shared.record(truth);
        }
    }
}

impl Emitter {
    fn chunks(&self) -> &Chunks {
        match self.api {
            Api::Chat => &self.shared.chat,
            Api::Completions => &self.shared.completions,
        }
    }

    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        match self.phase {
            Phase::Done => {
                let delay = self.shared.config.end_delay;
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                None
            }
            Phase::Opening => {
                self.phase = Phase::Text;
                Some(Ok(self.chunks().opening.clone()))
            }
            Phase::Text => {
                tokio::time::sleep_until(self.deadline.into()).await;
                let truth = self
                    .truth
                    .as_mut()
                    .expect("the truth is kept until the stream ends");
                let sent = truth.texts.len() as u32;
                let due = truth
                    .fault
                    .filter(|f| f.after() == Some(sent) && !self.fault_shown);
                if let Some(fault) = due {
                    self.fault_shown = true;
                    if matches!(fault, Fault::Close { .. }) {
                        // hyper drops what it has buffered when a body fails, and it flushes
                        // when the body is pending. Under load the deadline may have passed
                        // before the stream is polled, so the chunks before the close would
                        // still sit in its buffer: be pending once so that they go out.
                        tokio::task::yield_now().await;
                    }
                    return Some(self.fault(fault));
                }
                // The instant the chunk is handed to the connection, which writes it at once.
                let now = Instant::now();
                truth.texts.push(now);
                truth.due.push(self.deadline);
                self.shared.texts_written.fetch_add(1, Ordering::Relaxed);
                let config = &self.shared.config;
                self.deadline += jittered(config.itl, config.itl_jitter, &mut self.rng);
                let word = self.chunks().words[sent as usize % WORDS.len()].clone();
                let truth = self
                    .truth
                    .as_mut()
                    .expect("the truth is kept until the stream ends");
                if sent + 1 < truth.tokens {
                    return Some(Ok(word));
                }
                // The last token, with the finish chunk, usage and [DONE] in the same write.
                truth.completed = truth.fault.is_none();
                let (prompt_tokens, tokens) = (truth.prompt_tokens, truth.tokens);
                let mut last = word.to_vec();
                last.extend_from_slice(&self.chunks().tail(self.finish, prompt_tokens, tokens));
                self.phase = Phase::Done;
                if let Some(truth) = self.truth.take() {
                    self.shared.record(truth);
                }
                Some(Ok(Bytes::from(last)))
            }
        }
    }

    /// What a faulty request writes instead of its next text chunk.
    fn fault(&mut self, fault: Fault) -> Result<Bytes, std::io::Error> {
        let truth = self
            .truth
            .as_ref()
            .expect("the truth is kept until the stream ends");
        match fault {
            // The next text chunk goes out on schedule.
            Fault::Malformed { .. } => Ok(Bytes::from_static(
                b"data: {\"choices\":[{\"delta\":{\"content\":\" broken\"}\n\n",
            )),
            Fault::ErrorEvent { .. } => {
                self.phase = Phase::Done;
                let message = format!(
                    "the truth server failed request {} mid-stream on purpose",
                    truth.index
                );
                let error =
                    json!({"error": {"message": message, "type": "server_error", "code": 500}});
                Ok(Bytes::from(format!("data: {error}\n\ndata: [DONE]\n\n")))
            }
            Fault::Close { .. } | Fault::Refuse => {
                self.phase = Phase::Done;
                Err(std::io::Error::other(
                    "the truth server closes this stream on purpose",
                ))
            }
        }
    }
}

/// `/tokenize`, llama.cpp style: one token per whitespace-separated word of `content` (or
/// vLLM's `prompt`).
async fn tokenize(Json(body): Json<Value>) -> Response {
    let text = body
        .get("content")
        .or_else(|| body.get("prompt"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let tokens: Vec<u64> = (0..words(text)).collect();
    Json(json!({ "tokens": tokens })).into_response()
}

/// `/metrics`: no counters (the harness reads them around each run); the answer's instant is
/// recorded.
async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let body = "# the truth server counts nothing\n";
    shared
        .scrapes
        .lock()
        .expect("the scrape list is never poisoned")
        .push(Instant::now());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// The requests of a step's summarized runs, each paired with its truth, and the truth's
/// figures defined the way the harness measures them.
#[derive(Debug, Clone, Default)]
pub struct Paired {
    /// Truth TTFT from the harness's send instant: first text chunk written − (run start + the
    /// sample's offset), the run start bounded from below by the `/metrics` answer the harness
    /// read just before starting its clock. What the harness should report.
    pub ttft_from_send: Vec<f64>,
    /// Truth TTFT as the server saw it: first text chunk written − request arrival.
    pub ttft_from_arrival: Vec<f64>,
    /// Send to arrival (at most; the run start is bounded from below): time the harness counts
    /// in TTFT before the server had the request (building and writing it, the loopback, the
    /// server's thread getting a core).
    pub delivery: Vec<f64>,
    /// Gaps between text chunks written.
    pub itl: Vec<f64>,
    /// (last text − first text) / (tokens − 1).
    pub tpot: Vec<f64>,
    /// How late the server wrote each text chunk after its deadline.
    pub lateness: Vec<f64>,
}

/// Pairs `runs` (a step's runs in order, the cold one first) with `truths` (in arrival order)
/// and `scrapes` ([`TruthServer::scrapes`]). Runs do not overlap, so run `r`'s requests are the
/// next `requests.len()` truths; within a run a sample and its truth have the same output
/// length (the server cycles lengths). Like `StepSummary`, only the warm runs' successful
/// requests count (the cold run's when there is no warm one).
pub fn pair(runs: &[RunResult], truths: &[Truth], scrapes: &[Instant]) -> Result<Paired, String> {
    let mut paired = Paired::default();
    let mut rest = truths;
    let any_warm = runs.iter().any(|r| !r.cold);
    for run in runs {
        if rest.len() < run.requests.len() {
            return Err(format!(
                "run {}: {} requests, only {} truths left",
                run.index,
                run.requests.len(),
                rest.len()
            ));
        }
        let (mine, next) = rest.split_at(run.requests.len());
        rest = next;
        if run.cold && any_warm {
            continue;
        }
        let first_arrival = mine
            .iter()
            .map(|t| t.arrived)
            .min()
            .ok_or("a run without requests")?;
        let start = scrapes
            .iter()
            .filter(|s| **s <= first_arrival)
            .max()
            .ok_or_else(|| format!("run {}: no /metrics read before its requests", run.index))?;
        for sample in run.requests.iter().filter(|s| s.ok) {
            let tokens = sample
                .output_tokens
                .ok_or("a successful sample without output tokens")?;
            let mut same = mine.iter().filter(|t| u64::from(t.tokens) == tokens);
            let (Some(truth), None) = (same.next(), same.next()) else {
                return Err(format!(
                    "run {}: no single truth of {tokens} tokens",
                    run.index
                ));
            };
            let sent = *start + Duration::from_secs_f64(sample.offset_ms / 1000.0);
            let first = *truth
                .texts
                .first()
                .ok_or("a successful request whose truth has no text")?;
            let signed_ms = |a: Instant, b: Instant| {
                if a >= b {
                    ms(a.duration_since(b))
                } else {
                    -ms(b.duration_since(a))
                }
            };
            paired.ttft_from_send.push(signed_ms(first, sent));
            paired.ttft_from_arrival.extend(truth.ttft_ms());
            paired.delivery.push(signed_ms(truth.arrived, sent));
            paired.itl.extend(truth.itl_ms());
            paired.tpot.extend(truth.tpot_ms());
            paired.lateness.extend(truth.lateness_ms());
        }
    }
    Ok(paired)
}

/// TTFT, ITL and TPOT statistics, from the harness or from the truth.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub ttft: Option<Stats>,
    pub itl: Option<Stats>,
    pub tpot: Option<Stats>,
}

impl Figures {
    /// What the server really did, TTFT from the harness's send instant.
    pub fn of_truth(paired: &Paired) -> Figures {
        Figures {
            ttft: Stats::of(paired.ttft_from_send.iter().copied()),
            itl: Stats::of(paired.itl.iter().copied()),
            tpot: Stats::of(paired.tpot.iter().copied()),
        }
    }

    /// What the harness reported for a step.
    pub fn of_summary(summary: &StepSummary) -> Figures {
        Figures {
            ttft: summary.ttft_ms,
            itl: summary.itl_ms,
            tpot: summary.tpot_ms,
        }
    }
}

/// One percentile as measured and as it truly was.
#[derive(Debug, Clone)]
pub struct Deviation {
    pub figure: &'static str,
    pub percentile: &'static str,
    pub measured: f64,
    pub truth: f64,
    /// The larger of the relative and absolute margins, in ms.
    pub allowed: f64,
}

impl Deviation {
    pub fn error(&self) -> f64 {
        self.measured - self.truth
    }

    pub fn within(&self) -> bool {
        self.error().abs() <= self.allowed
    }
}

impl std::fmt::Display for Deviation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let relative = if self.truth == 0.0 {
            0.0
        } else {
            100.0 * self.error() / self.truth
        };
        write!(
            f,
            "{:>4} {:<6} measured {:>9.3} ms  truth {:>9.3} ms  error {:>+7.3} ms ({:>+6.2} %)  allowed ±{:.3} ms{}",
            self.figure,
            self.percentile,
            self.measured,
            self.truth,
            self.error(),
            relative,
            self.allowed,
            if self.within() { "" } else { "  <-- OUTSIDE" }
        )
    }
}

/// p10, median, p90 and p99 of TTFT, ITL and TPOT, measured against truth, each allowed
/// `relative` of the truth or `floor_ms`, whichever is larger. A figure missing on either side,
/// or counted over a different number of values, is an error.
pub fn compare(
    measured: &Figures,
    truth: &Figures,
    relative: f64,
    floor_ms: f64,
) -> Result<Vec<Deviation>, String> {
    let mut out = Vec::new();
    let pairs = [
        ("TTFT", measured.ttft, truth.ttft),
        ("ITL", measured.itl, truth.itl),
        ("TPOT", measured.tpot, truth.tpot),
    ];
    for (figure, measured, truth) in pairs {
        let (Some(m), Some(t)) = (measured, truth) else {
            return Err(format!("{figure}: measured {measured:?}, truth {truth:?}"));
        };
        if m.n != t.n {
            return Err(format!(
                "{figure}: {} values measured, {} in truth",
                m.n, t.n
            ));
        }
        let percentiles = [
            ("p10", m.p10, t.p10),
            ("median", m.median, t.median),
            ("p90", m.p90, t.p90),
            ("p99", m.p99, t.p99),
        ];
        for (percentile, measured, truth) in percentiles {
            let allowed = (truth.abs() * relative).max(floor_ms);
            out.push(Deviation {
                figure,
                percentile,
                measured,
                truth,
                allowed,
            });
        }
    }
    Ok(out)
}

/// p10/median/p90/p99 of `values` in one line.
pub fn spread(values: &[f64]) -> String {
    match Stats::of(values.iter().copied()) {
        Some(s) => format!(
            "p10 {:.3}  median {:.3}  p90 {:.3}  p99 {:.3}  max {:.3} ms",
            s.p10, s.median, s.p90, s.p99, s.max
        ),
        None => "none".into(),
    }
}
