//! One streamed request, timed the way benchmarks.md defines it: TTFT at the first chunk that
//! carries generated text (not the role-only opener), inter-token latency between text chunks,
//! E2E at the last byte, token counts from the engine's `usage` (llama.cpp's `timings` else),
//! and the engine's own decode speed and speculative counts when it reports them.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rigdeck_gateway::proxy::sse::{events, EventSplitter};
use rigdeck_gateway::proxy::tally::{carries_text, Tally};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What one request measured. Times are milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was sent, from the start of its run.
    pub offset_ms: f64,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: f64,
    /// (E2E − TTFT) / (output tokens − 1).
    pub tpot_ms: Option<f64>,
    pub prompt_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// Output tokens counted from text chunks because the engine sent no usage.
    #[serde(default)]
    pub output_counted: bool,
    /// Chunks that carried text.
    pub chunks: u32,
    /// llama.cpp's `timings.predicted_per_second`.
    pub engine_decode_tps: Option<f64>,
    /// llama.cpp's `timings.prompt_per_second`.
    pub engine_prompt_tps: Option<f64>,
    /// llama.cpp's `timings.draft_n` and `draft_n_accepted`.
    pub draft_tokens: Option<u64>,
    pub draft_accepted: Option<u64>,
    /// Gaps between text chunks; summarized per step, not stored per request.
    #[serde(skip)]
    pub itl_ms: Vec<f64>,
}

impl Sample {
    /// Output tokens per second of this stream: 1 / TPOT.
    pub fn stream_tps(&self) -> Option<f64> {
        self.tpot_ms.filter(|t| *t > 0.0).map(|t| 1000.0 / t)
    }

    /// Prompt tokens over TTFT (the client's view of prefill), uncached tokens only.
    pub fn prefill_tps(&self) -> Option<f64> {
        let ttft = self.ttft_ms.filter(|t| *t > 0.0)?;
        let prompt = self.prompt_tokens? - self.cached_tokens.unwrap_or(0).min(self.prompt_tokens?);
        (prompt > 0).then(|| prompt as f64 * 1000.0 / ttft)
    }
}

/// The largest error body kept in a message.
const ERROR_BODY: usize = 400;

/// Sends `body` (JSON, serialized before the clock starts) to `url` and times the answer's
/// stream. Never fails: what went wrong is the sample's `error`, with whatever was measured
/// before it.
pub async fn send(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: Vec<u8>,
    timeout: Duration,
    run_start: Instant,
) -> Sample {
    let sent = Instant::now();
    let mut timing = Timing::new(sent);
    let outcome = tokio::time::timeout(timeout, stream(client, url, key, body, &mut timing)).await;
    let error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(message)) => Some(message),
        Err(_) => Some(format!(
            "no answer within {} s (the request's limit)",
            timeout.as_secs()
        )),
    };
    timing.finish(sent.duration_since(run_start), error)
}

async fn stream(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: Vec<u8>,
    timing: &mut Timing,
) -> Result<(), String> {
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = send_request(request)
        .await
        .map_err(|e| format!("cannot reach {url}: {}", root_cause(&e)))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("{url} answered {status}: {}", error_text(&text)));
    }
    let mut splitter = EventSplitter::default();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let now = Instant::now();
        let chunk = chunk.map_err(|e| format!("the stream broke: {}", root_cause(&e)))?;
        if let Some(whole) = splitter.push(&chunk) {
            if timing.events(&whole, now)? {
                drain(body).await;
                return Ok(());
            }
        }
    }
    if let Some(rest) = splitter.rest() {
        if timing.events(&rest, Instant::now())? {
            return Ok(());
        }
    }
    if timing.tally.first_token.is_none() && timing.tally.completion_tokens.is_none() {
        return Err("the stream ended without any generated text".into());
    }
    Ok(())
}

/// Reads a body to its end after `[DONE]` (bounded), so the connection goes back to the pool
/// instead of being dropped: a warm request must not pay for a new connection in its TTFT.
async fn drain<S, B, E>(mut body: S)
where
    S: futures_util::Stream<Item = Result<B, E>> + Unpin,
{
    const LONGEST: Duration = Duration::from_secs(1);
    let _ = tokio::time::timeout(LONGEST, async {
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
}

/// What a stream showed so far.
struct Timing {
    sent: Instant,
    tally: Tally,
    last_text: Option<Instant>,
    chunks: u32,
    itl_ms: Vec<f64>,
    end: Option<Instant>,
    draft_tokens: Option<u64>,
    draft_accepted: Option<u64>,
}

impl Timing {
    fn new(sent: Instant) -> Self {
        Timing {
            sent,
            tally: Tally::default(),
            last_text: None,
            chunks: 0,
            itl_ms: Vec::new(),
            end: None,
            draft_tokens: None,
            draft_accepted: None,
        }
    }

    /// Reads whole events; true at `[DONE]`. A chunk that is not JSON is an error: the stream
    /// cannot be trusted past it.
    fn events(&mut self, bytes: &[u8], now: Instant) -> Result<bool, String> {
        self.end = Some(now);
        for (_, event) in events(bytes) {
            let data = event.data.as_slice();
            if data.is_empty() {
                continue;
            }
            if data == b"[DONE]" {
                return Ok(true);
            }
            let value: Value = serde_json::from_slice(data).map_err(|e| {
                let shown = String::from_utf8_lossy(&data[..data.len().min(120)]).into_owned();
                format!("a malformed stream chunk ({e}): {shown}")
            })?;
            if carries_text(&value) {
                self.text_chunk(now);
            }
            self.tally.read_counts(&value);
            self.read_drafts(&value);
            if let Some(message) = self.tally.error.take() {
                return Err(format!(
                    "the engine reported an error mid-stream: {message}"
                ));
            }
        }
        Ok(false)
    }

    fn text_chunk(&mut self, now: Instant) {
        self.tally.first_token.get_or_insert(now);
        if let Some(previous) = self.last_text {
            self.itl_ms.push(ms(now.duration_since(previous)));
        }
        self.last_text = Some(now);
        self.chunks += 1;
    }

    fn read_drafts(&mut self, value: &Value) {
        if let Some(timings) = value.get("timings") {
            let number = |k: &str| timings.get(k).and_then(Value::as_u64);
            self.draft_tokens = number("draft_n").or(self.draft_tokens);
            self.draft_accepted = number("draft_n_accepted").or(self.draft_accepted);
        }
    }

    fn finish(self, offset: Duration, error: Option<String>) -> Sample {
        let end = self.end.unwrap_or_else(Instant::now);
        let e2e_ms = ms(end.duration_since(self.sent));
        let ttft_ms = self
            .tally
            .first_token
            .map(|t| ms(t.duration_since(self.sent)));
        let output_counted = self.tally.completion_tokens.is_none() && self.chunks > 0;
        let output_tokens = self
            .tally
            .completion_tokens
            .or((self.chunks > 0).then_some(u64::from(self.chunks)));
        let tpot_ms = match (ttft_ms, output_tokens) {
            (Some(ttft), Some(n)) if n > 1 && e2e_ms > ttft => {
                Some((e2e_ms - ttft) / (n - 1) as f64)
            }
            _ => None,
        };
        Sample {
            offset_ms: ms(offset),
            ok: error.is_none(),
            error,
            ttft_ms,
            e2e_ms,
            tpot_ms,
            prompt_tokens: self.tally.prompt_tokens,
            output_tokens,
            cached_tokens: self.tally.cached_tokens,
            output_counted,
            chunks: self.chunks,
            engine_decode_tps: self.tally.engine_decode_tps,
            engine_prompt_tps: self.tally.engine_prompt_tps,
            draft_tokens: self.draft_tokens,
            draft_accepted: self.draft_accepted,
            itl_ms: self.itl_ms,
        }
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// An error body's message (OpenAI's `error.message`), else its first bytes.
pub(crate) fn error_text(body: &str) -> String {
    let parsed = serde_json::from_str::<Value>(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
    });
    match message {
        Some(m) => m.to_owned(),
        None if body.trim().is_empty() => "(no body)".to_owned(),
        None => body.chars().take(ERROR_BODY).collect(),
    }
}

/// Sends a request, once more on a new connection when the pooled one had been closed by
/// the engine (the gateway's own rule, see `rigdeck_gateway::proxy::send`).
pub(crate) use rigdeck_gateway::proxy::send as send_request;

/// The innermost cause of a client error ("connection refused"), which says what to fix.
pub(crate) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttft_waits_for_text_and_itl_counts_gaps_between_text_chunks() {
        let t0 = Instant::now();
        let mut timing = Timing::new(t0);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let role =
            b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert_eq!(timing.events(role, at(5)), Ok(false));
        let text = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
        timing.events(text, at(50)).expect("text");
        timing.events(text, at(60)).expect("text");
        timing.events(text, at(75)).expect("text");
        let usage = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3},\"timings\":{\"draft_n\":4,\"draft_n_accepted\":3}}\n\ndata: [DONE]\n\n";
        assert_eq!(timing.events(usage, at(80)), Ok(true));
        let sample = timing.finish(Duration::ZERO, None);
        assert_eq!(sample.ttft_ms, Some(50.0));
        assert_eq!(sample.itl_ms, vec![10.0, 15.0]);
        assert_eq!(sample.e2e_ms, 80.0);
        assert_eq!(sample.tpot_ms, Some(15.0));
        assert_eq!(
            (sample.output_tokens, sample.output_counted),
            (Some(3), false)
        );
        assert_eq!(
            (sample.draft_tokens, sample.draft_accepted),
            (Some(4), Some(3))
        );
    }

    #[test]
    fn a_malformed_chunk_or_an_error_event_ends_the_request_with_a_message() {
        let mut timing = Timing::new(Instant::now());
        let err = timing
            .events(b"data: {not json\n\n", Instant::now())
            .expect_err("malformed");
        assert!(err.contains("malformed stream chunk"), "{err}");
        let mut timing = Timing::new(Instant::now());
        let err = timing
            .events(
                b"data: {\"error\":{\"message\":\"out of memory\"}}\n\n",
                Instant::now(),
            )
            .expect_err("error event");
        assert!(err.contains("out of memory"), "{err}");
    }

    #[test]
    fn error_bodies_are_read_for_their_message() {
        assert_eq!(
            error_text(r#"{"error":{"message":"model not found"}}"#),
            "model not found"
        );
        assert_eq!(error_text(""), "(no body)");
        assert_eq!(error_text("plain").as_str(), "plain");
    }
}
