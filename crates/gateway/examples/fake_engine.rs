//! A fake llama-server with fixed timings: the upstream of the gateway benchmark
//! (`tests/bench/gateway_vs_litellm.sh`), so "added latency" is measured against a known truth.
//!
//! It answers `--version`, `--help` and `--list-devices` like llama-server, so
//! `rigdeck engines register PATH` accepts it, and takes llama-server's argv (`-m MODEL --host H
//! --port P -c … -ngl … -np …`), ignoring every option it has no use for, so a launch profile
//! starts it. Routes: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions` (streaming
//! and not). Each streamed chunk holds one token and `emit_ns`, the wall-clock time (ns since the
//! Unix epoch) it was written, so a client on the same host computes per-chunk latency exactly.
//!
//! Timings, each a flag or an environment variable (flag first), defaults in brackets:
//! `--ttft-ms`/`FAKE_ENGINE_TTFT_MS` [50], `--itl-ms`/`FAKE_ENGINE_ITL_MS` [10],
//! `--tokens`/`FAKE_ENGINE_TOKENS` [200] (a request's `max_tokens` wins),
//! `--load-ms`/`FAKE_ENGINE_LOAD_MS` [0] (`/health` answers 503 that long, as while loading).
//!
//!   cargo run -p rigdeck-gateway --example fake_engine -- --port 0 --itl-ms 5

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream;
use serde_json::{json, Value};
use tokio::time::Instant;

const VERSION: &str = "\
version: 0.0.0-fake (build 0, commit fake)
built with rustc for Linux x86_64
";

/// llama-server's help layout (options at column 0, descriptions at column 40), which
/// Rigdeck's capability probe reads: it needs `--model` and `--port`, and a profile's extra
/// arguments must be options listed here.
const HELP: &str = "\
usage: fake_engine [options]

A fake llama-server with fixed timings, for Rigdeck's gateway benchmark. Options it has no use
for are accepted and ignored.

----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
--list-devices                          print list of available devices and exit
-t,    --threads N                      number of CPU threads (ignored)
-c,    --ctx-size N                     size of the prompt context (ignored)
-n,    --predict, --n-predict N         tokens per answer when a request gives no max_tokens
-b,    --batch-size N                   logical maximum batch size (ignored)
-ub,   --ubatch-size N                  physical maximum batch size (ignored)
-fa,   --flash-attn [on|off|auto]       Flash Attention (ignored)
-ctk,  --cache-type-k TYPE              KV cache data type for K (ignored)
-ctv,  --cache-type-v TYPE              KV cache data type for V (ignored)
-kvu,  --kv-unified                     one KV buffer for all sequences (ignored)
-no-kvu, --no-kv-unified                one KV buffer per sequence (ignored)
-nkvo, --no-kv-offload                  keep the KV cache on the CPU (ignored)
-ngl,  --gpu-layers, --n-gpu-layers N   layers to store in VRAM (ignored)
-sm,   --split-mode {none,layer,row}    how to split the model across GPUs (ignored)
-ts,   --tensor-split N0,N1,N2,...      fraction of the model per GPU (ignored)
-mg,   --main-gpu INDEX                 the GPU for the model (ignored)
-ot,   --override-tensor <tensor name pattern>=<buffer type>,...
                                        override tensor buffer type (ignored)
-m,    --model FNAME                    model path (not read; /v1/models names it)

----- server params -----

--host HOST                             ip address to listen on (default: 127.0.0.1)
--port PORT                             port to listen on (default: 8080; 0: any free port)
-a,    --alias STRING                   model name in /v1/models (default: the model path)
-np,   --parallel N                     number of server slots (ignored: no limit)
--api-key KEY                           API key clients must send as a bearer token
--metrics                               Prometheus metrics (ignored)
--jinja                                 use the model's chat template (ignored)

----- fake engine -----

--ttft-ms N                             time to first token in ms (env FAKE_ENGINE_TTFT_MS, 50)
--itl-ms N                              gap between tokens in ms (env FAKE_ENGINE_ITL_MS, 10)
--tokens N                              default tokens per answer (env FAKE_ENGINE_TOKENS, 200)
--load-ms N                             /health answers 503 this long (env FAKE_ENGINE_LOAD_MS, 0)
";

/// Words the fake "model" says, one per token, in turn.
const WORDS: [&str; 8] = [
    " the", " quick", " brown", " fox", " jumps", " over", " a", " dog",
];

#[derive(Debug, Clone)]
struct Config {
    host: String,
    port: u16,
    model: String,
    api_key: Option<String>,
    ttft: Duration,
    itl: Duration,
    tokens: u64,
    load: Duration,
}

/// What the command line asked for: serve, or print something and exit.
enum Command {
    Serve(Config),
    Print(&'static str),
}

fn parse_args(args: &[String]) -> Result<Command, String> {
    let env_ms = |name: &str, default: u64| -> Result<u64, String> {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse()
                .map_err(|_| format!("{name}={v:?} is not a whole number of milliseconds")),
            Err(_) => Ok(default),
        }
    };
    let mut host = "127.0.0.1".to_owned();
    let mut port: u16 = 8080;
    let mut model: Option<String> = None;
    let mut alias: Option<String> = None;
    let mut api_key = None;
    let mut ttft = env_ms("FAKE_ENGINE_TTFT_MS", 50)?;
    let mut itl = env_ms("FAKE_ENGINE_ITL_MS", 10)?;
    let mut tokens = env_ms("FAKE_ENGINE_TOKENS", 200)?;
    let mut load = env_ms("FAKE_ENGINE_LOAD_MS", 0)?;

    let mut i = 0;
    while i < args.len() {
        // `--port=8080` and `--port 8080` both work, as in llama.cpp.
        let (flag, inline) = match args[i].split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (args[i].as_str(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value ({what})"))
        };
        let number = |text: String| -> Result<u64, String> {
            text.parse()
                .map_err(|_| format!("{flag} {text}: not a whole number"))
        };
        match flag {
            "-h" | "--help" | "--usage" => return Ok(Command::Print(HELP)),
            "--version" => return Ok(Command::Print(VERSION)),
            // No ggml devices: Rigdeck's backend detection reads this as a CPU build.
            "--list-devices" => return Ok(Command::Print("Available devices:\n")),
            "-m" | "--model" => model = Some(value("FNAME")?),
            "-a" | "--alias" => alias = Some(value("STRING")?),
            "--host" => host = value("HOST")?,
            "--port" => {
                let text = value("PORT")?;
                port = text
                    .parse()
                    .map_err(|_| format!("--port {text}: not a port number"))?;
            }
            "--api-key" => api_key = Some(value("KEY")?),
            "--ttft-ms" => ttft = number(value("N")?)?,
            "--itl-ms" => itl = number(value("N")?)?,
            "--tokens" | "-n" | "--predict" | "--n-predict" => tokens = number(value("N")?)?,
            "--load-ms" => load = number(value("N")?)?,
            // Anything else is an option llama-server has and this fake does not need (or its
            // value): Rigdeck passes the whole placement (`-c`, `-ngl`, `-np`, `-ot`, …).
            _ => {}
        }
        i += 1;
    }
    let model = alias
        .or(model)
        .unwrap_or_else(|| "fake-model.gguf".to_owned());
    Ok(Command::Serve(Config {
        host,
        port,
        model,
        api_key,
        ttft: Duration::from_millis(ttft),
        itl: Duration::from_millis(itl),
        tokens,
        load: Duration::from_millis(load),
    }))
}

struct AppState {
    config: Config,
    started: Instant,
    loaded: AtomicBool,
    next_id: AtomicU64,
}

fn now_ns() -> u64 {
    // A clock before 1970 is a broken host; 0 then makes every latency absurd, which shows.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn unix_s() -> u64 {
    now_ns() / 1_000_000_000
}

/// llama-server's error body.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": message, "type": kind}});
    (status, Json(body)).into_response()
}

/// The refusal for a request without the `--api-key` (llama-server checks the bearer token).
fn refused(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let key = state.config.api_key.as_ref()?;
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    (sent != Some(key.as_str())).then(|| {
        error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "Invalid API Key",
        )
    })
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.loaded.load(Ordering::Relaxed) || state.started.elapsed() >= state.config.load {
        state.loaded.store(true, Ordering::Relaxed);
        Json(json!({"status": "ok"})).into_response()
    } else {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            "Loading model",
        )
    }
}

async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(refusal) = refused(&state, &headers) {
        return refusal;
    }
    let model = &state.config.model;
    Json(json!({
        "object": "list",
        "data": [{"id": model, "object": "model", "created": unix_s(), "owned_by": "llamacpp"}],
        "models": [{"name": model, "model": model}],
    }))
    .into_response()
}

/// One request's parameters and the ids its chunks carry.
struct Job {
    id: String,
    model: String,
    created: u64,
    tokens: u64,
    prompt_tokens: u64,
    include_usage: bool,
    ttft: Duration,
    itl: Duration,
}

impl Job {
    fn timings(&self, predicted: u64) -> Value {
        let prompt_ms = self.ttft.as_secs_f64() * 1e3;
        let per_token_ms = self.itl.as_secs_f64() * 1e3;
        let predicted_ms = per_token_ms * predicted.saturating_sub(1) as f64;
        let per_second = |n: u64, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        json!({
            "prompt_n": self.prompt_tokens,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / self.prompt_tokens.max(1) as f64,
            "prompt_per_second": per_second(self.prompt_tokens, prompt_ms),
            "predicted_n": predicted,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": per_token_ms,
            "predicted_per_second": per_second(predicted, predicted_ms),
        })
    }

    fn usage(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.tokens,
            "total_tokens": self.prompt_tokens + self.tokens,
        })
    }

    /// A `chat.completion.chunk` stamped with the time it is written.
    fn chunk(&self, choices: Value, extra: &[(&str, Value)]) -> Bytes {
        let mut chunk = json!({
            "choices": choices,
            "created": self.created,
            "id": self.id,
            "model": self.model,
            "system_fingerprint": "fake",
            "object": "chat.completion.chunk",
        });
        for (key, value) in extra {
            chunk[*key] = value.clone();
        }
        // Stamped last, just before the bytes go to the connection.
        chunk["emit_ns"] = json!(now_ns());
        Bytes::from(format!("data: {chunk}\n\n"))
    }
}

/// Where a stream is: the role chunk, token `i` (0-based), the end chunks, done.
enum Step {
    Role,
    Token(u64),
    Finish,
    Usage,
    Done,
    Over,
}

/// The state a stream carries between chunks. Dropping it before the end means the client
/// went away: hyper drops the body, and with it the generation (nothing runs on its own).
struct Generation {
    job: Job,
    start: Instant,
    step: Step,
}

impl Drop for Generation {
    fn drop(&mut self) {
        if let Step::Token(i) = self.step {
            eprintln!(
                "fake_engine: {}: client went away after {i} of {} tokens; generation stopped",
                self.job.id, self.job.tokens
            );
        }
    }
}

/// `n` gaps of `itl`.
fn after(itl: Duration, n: u64) -> Duration {
    Duration::from_nanos((itl.as_nanos() as u64).saturating_mul(n))
}

fn streamed(job: Job) -> Response {
    let generation = Generation {
        job,
        start: Instant::now(),
        step: Step::Role,
    };
    let chunks = stream::unfold(generation, |mut g| async move {
        let (bytes, next) = match g.step {
            Step::Role => {
                let delta = json!([{"index": 0, "finish_reason": null,
                    "delta": {"role": "assistant", "content": null}}]);
                let next = if g.job.tokens == 0 {
                    Step::Finish
                } else {
                    Step::Token(0)
                };
                (g.job.chunk(delta, &[]), next)
            }
            Step::Token(i) => {
                // A fixed schedule from the start, so a late wake-up does not delay the rest.
                let due = g.start + g.job.ttft + after(g.job.itl, i);
                tokio::time::sleep_until(due).await;
                let word = WORDS[i as usize % WORDS.len()];
                let delta = json!([{"index": 0, "finish_reason": null,
                    "delta": {"content": word}}]);
                let next = if i + 1 < g.job.tokens {
                    Step::Token(i + 1)
                } else {
                    Step::Finish
                };
                (g.job.chunk(delta, &[]), next)
            }
            Step::Finish => {
                let finish = if g.job.tokens > 0 { "length" } else { "stop" };
                let delta = json!([{"index": 0, "finish_reason": finish, "delta": {}}]);
                if g.job.include_usage {
                    (g.job.chunk(delta, &[]), Step::Usage)
                } else {
                    // llama.cpp puts its timings on the last chunk.
                    let timings = g.job.timings(g.job.tokens);
                    (g.job.chunk(delta, &[("timings", timings)]), Step::Done)
                }
            }
            Step::Usage => {
                let extra = [
                    ("usage", g.job.usage()),
                    ("timings", g.job.timings(g.job.tokens)),
                ];
                (g.job.chunk(json!([]), &extra), Step::Done)
            }
            Step::Done => (Bytes::from_static(b"data: [DONE]\n\n"), Step::Over),
            Step::Over => return None,
        };
        g.step = next;
        Some((Ok::<_, Infallible>(bytes), g))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(chunks))
        .unwrap_or_else(|e| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                &e.to_string(),
            )
        })
}

async fn whole(job: Job) -> Response {
    let elapsed = job.ttft + after(job.itl, job.tokens.saturating_sub(1));
    tokio::time::sleep(elapsed).await;
    let content: String = (0..job.tokens)
        .map(|i| WORDS[i as usize % WORDS.len()])
        .collect();
    Json(json!({
        "choices": [{"index": 0, "finish_reason": if job.tokens > 0 { "length" } else { "stop" },
            "message": {"role": "assistant", "content": content}}],
        "created": job.created,
        "id": job.id,
        "model": job.model,
        "system_fingerprint": "fake",
        "object": "chat.completion",
        "usage": job.usage(),
        "timings": job.timings(job.tokens),
        "emit_ns": now_ns(),
    }))
    .into_response()
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refusal) = refused(&state, &headers) {
        return refusal;
    }
    if !state.loaded.load(Ordering::Relaxed) && state.started.elapsed() < state.config.load {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            "Loading model",
        );
    }
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "the body is not a JSON object",
            )
        }
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("the body is not JSON: {e}"),
            )
        }
    };
    let Some(messages) = request["messages"].as_array() else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "'messages' is required and must be an array",
        );
    };
    // About one token per word, as good as any tokenizer for a fake.
    let prompt_tokens = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(|text| text.split_whitespace().count() as u64)
        .sum::<u64>()
        .max(1);
    let tokens = ["max_tokens", "max_completion_tokens", "n_predict"]
        .iter()
        .find_map(|key| request[*key].as_u64())
        .unwrap_or(state.config.tokens);
    let n = state.next_id.fetch_add(1, Ordering::Relaxed);
    let job = Job {
        id: format!("chatcmpl-fake-{n}"),
        model: state.config.model.clone(),
        created: unix_s(),
        tokens,
        prompt_tokens,
        include_usage: request["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false),
        ttft: state.config.ttft,
        itl: state.config.itl,
    };
    if request["stream"].as_bool().unwrap_or(false) {
        streamed(job)
    } else {
        whole(job).await
    }
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not_found_error", "File Not Found")
}

async fn serve(config: Config) -> Result<(), String> {
    let address = format!("{}:{}", config.host, config.port);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let local: SocketAddr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    println!(
        "fake_engine: server is listening on http://{local} (model {}, ttft {} ms, itl {} ms, {} tokens)",
        config.model,
        config.ttft.as_millis(),
        config.itl.as_millis(),
        config.tokens
    );
    let state = Arc::new(AppState {
        config,
        started: Instant::now(),
        loaded: AtomicBool::new(false),
        next_id: AtomicU64::new(0),
    });
    let app = Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .fallback(not_found)
        .with_state(state);
    // A stop signal ends the process at once, streams in flight included, as llama-server
    // does; a graceful drain would keep Rigdeck's stop waiting on the longest stream.
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        served = axum::serve(listener, app) => served.map_err(|e| format!("server failed: {e}")),
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = term => Ok(()),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match parse_args(&args) {
        Ok(Command::Print(text)) => {
            print!("{text}");
            return std::process::ExitCode::SUCCESS;
        }
        Ok(Command::Serve(config)) => config,
        Err(message) => {
            eprintln!("fake_engine: {message}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the runtime: {e}"))
        .and_then(|runtime| runtime.block_on(serve(config)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fake_engine: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
