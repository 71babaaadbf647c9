//! The answer's way back to the client: every upstream chunk is passed on as it arrives (whole
//! events for a stream), read on the way by the [`Tally`], and the request is recorded once
//! when it ends: normally, with an engine that stopped mid-reply (the client then gets a final
//! error event), or with a client that went away (dropping the relay drops the upstream
//! connection, which cancels the engine's work). A client that keeps its connection but stops
//! reading is found by a watchdog: the engine's connection is closed and the request recorded.

use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;

use super::sse::{self, EventSplitter};
use super::tally::Tally;
use crate::clock::now_ms;
use crate::error::{Dialect, ErrorKind, GatewayError};
use crate::lock;
use crate::usage::Outcome;

/// The most of a whole (non-streamed) answer kept to read its usage; the client gets all of it.
const WHOLE_BODY_READ_LIMIT: usize = 16 << 20;

/// What happens when a request ends: the usage record is written, the in-flight count drops.
/// Dropped without [`Ending::finish`], it records the request as cancelled by the client.
pub trait Ending: Send + 'static {
    fn finish(
        self: Box<Self>,
        outcome: Outcome,
        http_status: u16,
        tally: &Tally,
        error: Option<String>,
    );
}

/// Records a request dropped before its end as cancelled.
pub struct EndGuard {
    ending: Option<Box<dyn Ending>>,
    pub http_status: u16,
}

impl EndGuard {
    pub fn new(ending: Box<dyn Ending>) -> Self {
        Self {
            ending: Some(ending),
            http_status: 499,
        }
    }

    pub fn finish(&mut self, outcome: Outcome, tally: &Tally, error: Option<String>) {
        if let Some(ending) = self.ending.take() {
            ending.finish(outcome, self.http_status, tally, error);
        }
    }

    pub fn tally_on_drop(&mut self, tally: &Tally) {
        self.finish(
            Outcome::Cancelled,
            tally,
            Some("the client went away".to_owned()),
        );
    }
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.tally_on_drop(&Tally::default());
    }
}

enum Framing {
    Events(EventSplitter),
    Whole(BytesMut),
}

type Upstream = crate::elsewhere::BodyStream;

/// What the relay shares with its watchdog.
struct Shared {
    /// Taken (and so closed) by the watchdog when the client stops reading.
    upstream: Mutex<Option<Upstream>>,
    /// What the answer told so far; the watchdog records it too when it ends the request.
    tally: Mutex<Tally>,
    end: Mutex<EndGuard>,
    /// When the last chunk went to the client's side; 0 while the engine has nothing to send.
    handed_at_ms: AtomicI64,
}

/// The upstream body, relayed.
pub struct Relay {
    shared: Arc<Shared>,
    /// Dropped with the relay, which ends its watchdog at once (not at its next look).
    _watched: Option<tokio::sync::oneshot::Sender<()>>,
    framing: Framing,
    drop_usage_chunk: bool,
    dialect: Dialect,
    model: String,
    /// An Anthropic stream whose first event has not passed yet (see [`message_start_for`]).
    first_event_due: bool,
    done: bool,
}

impl Relay {
    /// `stall`: how long a stream may wait for the client to take a chunk before the engine's
    /// connection is closed.
    pub fn new(
        upstream: Upstream,
        events: bool,
        drop_usage_chunk: bool,
        dialect: Dialect,
        model: String,
        end: EndGuard,
        stall: Duration,
    ) -> Self {
        let shared = Arc::new(Shared {
            upstream: Mutex::new(Some(upstream)),
            tally: Mutex::new(Tally::default()),
            end: Mutex::new(end),
            handed_at_ms: AtomicI64::new(0),
        });
        let watched = events.then(|| {
            let (watched, relay_gone) = tokio::sync::oneshot::channel();
            tokio::spawn(watch_client(Arc::downgrade(&shared), stall, relay_gone));
            watched
        });
        Self {
            shared,
            _watched: watched,
            framing: if events {
                Framing::Events(EventSplitter::default())
            } else {
                Framing::Whole(BytesMut::new())
            },
            drop_usage_chunk,
            first_event_due: events && dialect == Dialect::Anthropic,
            dialect,
            model,
            done: false,
        }
    }

    /// Reads a chunk and returns what the client gets of it.
    fn pass(&mut self, chunk: Bytes) -> Option<Bytes> {
        let now = Instant::now();
        match &mut self.framing {
            Framing::Whole(kept) => {
                if kept.len() + chunk.len() <= WHOLE_BODY_READ_LIMIT {
                    kept.extend_from_slice(&chunk);
                }
                Some(chunk)
            }
            Framing::Events(splitter) => {
                let whole = splitter.push(&chunk)?;
                let kept = keep_events(
                    &mut lock(&self.shared.tally),
                    whole,
                    now,
                    self.drop_usage_chunk,
                );
                if !std::mem::take(&mut self.first_event_due) {
                    return Some(kept);
                }
                Some(match message_start_for(&kept, &self.model) {
                    Some(start) => [start, kept].concat().into(),
                    None => kept,
                })
            }
        }
    }

    /// The stream ended: what is left over goes out, the request is recorded.
    fn end_of_stream(&mut self) -> Option<Bytes> {
        let now = Instant::now();
        let mut tally = lock(&self.shared.tally);
        let rest = match &mut self.framing {
            Framing::Whole(kept) => {
                tally.body(kept, now);
                None
            }
            Framing::Events(splitter) => splitter
                .rest()
                .map(|rest| keep_events(&mut tally, rest, now, self.drop_usage_chunk)),
        };
        let mut end = lock(&self.shared.end);
        let failed = end.http_status >= 400 || tally.error.is_some();
        let outcome = if failed { Outcome::Error } else { Outcome::Ok };
        end.finish(outcome, &tally, tally.error.clone());
        drop(end);
        rest.filter(|r| !r.is_empty())
    }

    /// The engine's connection broke mid-answer (it crashed or was killed).
    fn engine_failed(&mut self, err: &crate::elsewhere::BodyError) -> Option<Bytes> {
        let message = format!(
            "the engine serving '{}' stopped mid-reply ({err}); the Instances page shows why",
            self.model
        );
        let tally = lock(&self.shared.tally);
        lock(&self.shared.end).finish(Outcome::EngineError, &tally, Some(message.clone()));
        match self.framing {
            Framing::Events(_) => {
                Some(GatewayError::new(ErrorKind::Engine, message).sse_event(self.dialect))
            }
            Framing::Whole(_) => None,
        }
    }
}

/// The `message_start` event an Anthropic stream must open with, when the engine's begins with
/// a content event instead: llama-server leaves it out when the first token it samples is an
/// incomplete UTF-8 sequence, and Anthropic's own SDK then fails on the stream. `None` when the
/// stream opens as it should (or with an error).
fn message_start_for(first: &[u8], model: &str) -> Option<Bytes> {
    let events = sse::events(first);
    let kind = events.first()?.1.kind?;
    if !matches!(
        kind,
        "content_block_start" | "content_block_delta" | "content_block_stop" | "message_delta"
    ) {
        return None;
    }
    let message = serde_json::json!({
        "type": "message_start",
        "message": {
            "id": format!("msg_rigdeck_{:x}", now_ms()),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    });
    Some(Bytes::from(format!(
        "event: message_start\ndata: {message}\n\n"
    )))
}

/// Reads whole events and leaves out the usage chunk the gateway asked for on its own.
fn keep_events(tally: &mut Tally, whole: Bytes, now: Instant, drop_usage_chunk: bool) -> Bytes {
    let parsed = sse::events(&whole);
    let keep: Vec<bool> = parsed
        .iter()
        .map(|(_, event)| tally.event(&event.data, now, drop_usage_chunk))
        .collect();
    if keep.iter().all(|k| *k) {
        return whole;
    }
    let mut out = BytesMut::with_capacity(whole.len());
    for ((range, _), keep) in parsed.iter().zip(keep) {
        if keep {
            out.extend_from_slice(&whole[range.clone()]);
        }
    }
    out.freeze()
}

impl Stream for Relay {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            let polled = lock(&this.shared.upstream)
                .as_mut()
                .map(|upstream| upstream.as_mut().poll_next(cx));
            match polled {
                // The watchdog closed it: the client had stopped reading.
                None => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Some(Poll::Pending) => {
                    this.shared.handed_at_ms.store(0, Ordering::Relaxed);
                    return Poll::Pending;
                }
                Some(Poll::Ready(Some(Ok(chunk)))) => {
                    if let Some(out) = this.pass(chunk).filter(|b| !b.is_empty()) {
                        this.shared.handed_at_ms.store(now_ms(), Ordering::Relaxed);
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Some(Poll::Ready(Some(Err(err)))) => {
                    this.done = true;
                    return Poll::Ready(match this.engine_failed(&err) {
                        Some(event) => Some(Ok(event)),
                        // A whole answer cut short: the client must see a broken body, not
                        // a truncated one that looks complete.
                        None => Some(Err(std::io::Error::other(err))),
                    });
                }
                Some(Poll::Ready(None)) => {
                    this.done = true;
                    return Poll::Ready(this.end_of_stream().map(Ok));
                }
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let tally = lock(&self.shared.tally);
        lock(&self.shared.end).tally_on_drop(&tally);
    }
}

/// Closes the engine's connection of a stream whose client has not taken a chunk for `stall`
/// (it keeps its connection open but reads nothing), and records the request, so neither the
/// engine's slot nor the request count stays taken. Ends as soon as the relay is dropped.
async fn watch_client(
    shared: std::sync::Weak<Shared>,
    stall: Duration,
    mut relay_gone: tokio::sync::oneshot::Receiver<()>,
) {
    let stall_ms = i64::try_from(stall.as_millis()).unwrap_or(i64::MAX);
    let every = (stall / 4).max(Duration::from_millis(50));
    loop {
        tokio::select! {
            _ = &mut relay_gone => return,
            () = tokio::time::sleep(every) => {}
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let handed = shared.handed_at_ms.load(Ordering::Relaxed);
        if handed > 0 && now_ms() - handed >= stall_ms {
            drop(lock(&shared.upstream).take());
            let message = format!(
                "the client stopped reading for {} s: the engine's work was cancelled",
                stall.as_secs()
            );
            // What the answer told before the client stalled is kept in the record.
            let tally = lock(&shared.tally);
            lock(&shared.end).finish(Outcome::Cancelled, &tally, Some(message));
            return;
        }
    }
}
