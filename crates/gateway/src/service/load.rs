//! Models started on request: one load per model however many requests ask (single-flight on
//! its own task), room made by stopping idle models when VRAM admission refuses, and the
//! requests waiting for it — whole answers after the load, streams at once with the load's
//! progress as SSE comments.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::{fail, Call, Gateway, InUse};
use crate::error::{Dialect, ErrorKind, GatewayError};
use crate::fleet::{describe_gpus, ModelEntry, ModelState, StartError, Upstream};
use crate::lock;
use crate::proxy::relay::{EndGuard, Relay};
use crate::proxy::tally::Tally;
use crate::proxy::{self, stream_headers};
use crate::route::GatewayRequest;
use crate::usage::Outcome;

/// How many times one load starts a model stopped under it before it gives up.
const STARTS_PER_LOAD: u32 = 3;

/// How following a starting model ended.
enum Waited {
    Ready,
    /// Stopped or stopping (named) by someone else before it was ready.
    Stopped(&'static str),
}

/// A load in progress, as waiting requests follow it.
#[derive(Debug, Clone)]
pub(super) enum Load {
    Loading { progress: Option<f32> },
    Ready,
    Failed(GatewayError),
}

/// A load in progress in the gateway's table: what waiters follow, and a token each holds.
pub(super) struct LoadEntry {
    load: watch::Receiver<Load>,
    waiters: Arc<()>,
}

/// A request waiting for a load: the load it follows, and its place among the waiters.
pub(super) struct Waiter {
    load: watch::Receiver<Load>,
    _place: Arc<()>,
}

impl Gateway {
    /// Joins the load of `entry` in progress, or starts one. A burst of first requests thus
    /// starts one instance.
    pub(super) fn ensure_loading(self: &Arc<Self>, entry: &ModelEntry) -> watch::Receiver<Load> {
        self.loading(entry).load.clone()
    }

    fn loading(self: &Arc<Self>, entry: &ModelEntry) -> LoadEntry {
        let mut loads = lock(&self.loads);
        if let Some(load) = loads.get(&entry.name) {
            return LoadEntry {
                load: load.load.clone(),
                waiters: load.waiters.clone(),
            };
        }
        let (tx, rx) = watch::channel(Load::Loading { progress: None });
        let waiters = Arc::new(());
        loads.insert(
            entry.name.clone(),
            LoadEntry {
                load: rx.clone(),
                waiters: waiters.clone(),
            },
        );
        self.metrics.load(&entry.name);
        tokio::spawn(self.clone().load(entry.clone(), tx));
        LoadEntry { load: rx, waiters }
    }

    /// Joins the load of `entry` as one of its waiters, or refuses (429) when as many as the
    /// gateway lets wait already do: each keeps its request body until the model is ready.
    pub(super) fn join_load(self: &Arc<Self>, entry: &ModelEntry) -> Result<Waiter, GatewayError> {
        let joined = self.loading(entry);
        // The table's entry and `joined` itself hold a token each; the rest are waiters.
        let waiting = Arc::strong_count(&joined.waiters).saturating_sub(2);
        if waiting >= self.options.max_waiters {
            let mut err = GatewayError::new(
                ErrorKind::RateLimited,
                format!(
                    "{waiting} requests already wait for '{}' to load: retry once it is ready",
                    entry.name
                ),
            );
            err.retry_after_s = Some(5);
            return Err(err);
        }
        Ok(Waiter {
            load: joined.load,
            _place: joined.waiters,
        })
    }

    /// Runs on its own task, so a client that leaves does not cancel others' wait.
    async fn load(self: Arc<Self>, entry: ModelEntry, tx: watch::Sender<Load>) {
        let outcome = self.load_until_ready(&entry, &tx).await;
        if let Err(err) = &outcome {
            tracing::warn!("gateway: loading '{}' failed: {err}", entry.name);
        }
        tx.send_replace(match outcome {
            Ok(()) => Load::Ready,
            Err(err) => Load::Failed(err),
        });
        lock(&self.loads).remove(&entry.name);
    }

    /// Starts the model and follows it until it is ready. A model started on request that is
    /// stopped or restarted from the Instances page or the API while it loads is started again
    /// (the start waits for that stop or restart to finish), a few times at most: the requests
    /// waiting for it still want it.
    async fn load_until_ready(
        &self,
        entry: &ModelEntry,
        tx: &watch::Sender<Load>,
    ) -> Result<(), GatewayError> {
        let mut starts = 0;
        loop {
            starts += 1;
            self.start_making_room(entry).await?;
            match self.wait_ready(entry, tx).await? {
                Waited::Ready => return Ok(()),
                Waited::Stopped(_) if entry.policy.on_demand && starts < STARTS_PER_LOAD => {}
                Waited::Stopped(state) => {
                    return Err(GatewayError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "'{}' was {state} while loading (a stop from the Instances page or the API)",
                            entry.name
                        ),
                    ))
                }
            }
        }
    }

    /// Starts the model; when VRAM admission refuses, stops the least recently used idle model
    /// on the GPUs that are short, and tries again, until it starts or nothing may be stopped.
    async fn start_making_room(&self, entry: &ModelEntry) -> Result<(), GatewayError> {
        let unavailable = |message: String| GatewayError::new(ErrorKind::Unavailable, message);
        loop {
            match self.fleet.start(&entry.name).await {
                Ok(()) | Err(StartError::AlreadyRunning) => return Ok(()),
                Err(StartError::Refused(message)) => {
                    return Err(unavailable(format!(
                        "cannot start '{}': {message}",
                        entry.name
                    )))
                }
                Err(StartError::NeedsMemory { short, message }) => {
                    let gpus: Vec<u32> = short.iter().map(|(gpu, _)| *gpu).collect();
                    let Some(victim) = self.victim_for(&entry.name, &short).await else {
                        return Err(unavailable(format!(
                            "cannot load '{}' on {}: {message}; stopping the idle models the gateway may stop would not free enough (pinned models and models serving requests are never stopped)",
                            entry.name,
                            describe_gpus(&gpus)
                        )));
                    };
                    let reason = format!(
                        "{} needed for '{}': {message}",
                        describe_gpus(&gpus),
                        entry.name
                    );
                    self.stop_model(&victim, &entry.name, reason).await?;
                }
            }
        }
    }

    /// Follows the instance until it is ready, publishing its load progress; `Stopped` when it
    /// is stopped before.
    async fn wait_ready(
        &self,
        entry: &ModelEntry,
        tx: &watch::Sender<Load>,
    ) -> Result<Waited, GatewayError> {
        let deadline = Instant::now() + self.options.load_timeout;
        loop {
            match self.fleet.state(&entry.name) {
                ModelState::Ready(_) => return Ok(Waited::Ready),
                ModelState::Loading { progress } => {
                    tx.send_if_modified(|load| match load {
                        Load::Loading { progress: shown } if *shown != progress => {
                            *shown = progress;
                            true
                        }
                        _ => false,
                    });
                }
                ModelState::Crashed { explanation } => {
                    return Err(GatewayError::new(
                        ErrorKind::Unavailable,
                        format!("'{}' failed while loading: {explanation}", entry.name),
                    ))
                }
                state @ (ModelState::Stopped | ModelState::Stopping) => {
                    return Ok(Waited::Stopped(state.name()))
                }
            }
            if Instant::now() >= deadline {
                return Err(GatewayError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "'{}' is still loading after {} s: the Instances page shows its log",
                        entry.name,
                        self.options.load_timeout.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(self.options.poll_every).await;
        }
    }

    /// A non-streaming request waits for the load, then is forwarded.
    pub(super) async fn answer_after_load(
        self: &Arc<Self>,
        call: Call,
        request: GatewayRequest,
        entry: ModelEntry,
        mut waiter: Waiter,
        in_use: InUse,
    ) -> Response {
        let dialect = call.route.dialect();
        let end = call.end_guard(Some(in_use));
        let ready = self.upstream_after(&entry, &mut waiter.load).await;
        drop(waiter);
        match ready {
            Ok(upstream) => self.forward(&request, &upstream, &entry, end).await,
            Err(err) => fail(end, err, Outcome::Refused).response(dialect),
        }
    }

    /// Waits for a load to end; the ready model's address, or why it failed.
    pub(super) async fn upstream_after(
        &self,
        entry: &ModelEntry,
        load: &mut watch::Receiver<Load>,
    ) -> Result<Upstream, GatewayError> {
        let outcome = load
            .wait_for(|l| !matches!(l, Load::Loading { .. }))
            .await
            .map(|l| l.clone());
        match outcome {
            Ok(Load::Failed(err)) => Err(err),
            _ => match self.fleet.state(&entry.name) {
                ModelState::Ready(upstream) => Ok(upstream),
                state => Err(GatewayError::new(
                    ErrorKind::Unavailable,
                    format!("'{}' is {} after loading", entry.name, state.name()),
                )),
            },
        }
    }

    /// A streaming request gets its response at once: comments with the load's progress while
    /// the model loads (so loading and stuck look different), then the engine's stream, or an
    /// error event when the load fails.
    pub(super) fn stream_after_load(
        self: &Arc<Self>,
        call: Call,
        request: GatewayRequest,
        entry: ModelEntry,
        waiter: Waiter,
        in_use: InUse,
    ) -> Response {
        let dialect = call.route.dialect();
        let state = Waiting::Load(Box::new(LoadWait {
            gateway: self.clone(),
            request,
            entry,
            waiter,
            end: call.end_guard(Some(in_use)),
            started: Instant::now(),
            announced: false,
            dialect,
        }));
        let body = futures_util::stream::unfold(state, |state| async move {
            match state {
                Waiting::Load(wait) => wait.step().await,
                Waiting::Relaying(relay) => next_from(*relay).await,
                Waiting::Done => None,
            }
        });
        let mut response = Response::new(Body::from_stream(body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        stream_headers(&mut response);
        response
    }
}

/// The states of a stream that waits for a load.
enum Waiting {
    Load(Box<LoadWait>),
    Relaying(Box<Relay>),
    Done,
}

type Step = Option<(Result<Bytes, std::io::Error>, Waiting)>;

/// A streaming request waiting for its model to load.
struct LoadWait {
    gateway: Arc<Gateway>,
    request: GatewayRequest,
    entry: ModelEntry,
    waiter: Waiter,
    end: EndGuard,
    started: Instant,
    announced: bool,
    dialect: Dialect,
}

impl LoadWait {
    /// A progress comment while the load goes on (the first one at once), then the engine's
    /// first chunk or the error event.
    async fn step(mut self: Box<Self>) -> Step {
        let wait = if self.announced {
            self.gateway.options.progress_every
        } else {
            Duration::ZERO
        };
        let ended = self
            .waiter
            .load
            .wait_for(|l| !matches!(l, Load::Loading { .. }));
        if tokio::time::timeout(wait, ended).await.is_err() {
            let current = self.waiter.load.borrow().clone();
            let line = progress_line(&self.entry, &current, self.started.elapsed());
            self.announced = true;
            return Some((Ok(line), Waiting::Load(self)));
        }
        let LoadWait {
            gateway,
            request,
            entry,
            mut waiter,
            end,
            dialect,
            ..
        } = *self;
        let ready = gateway.upstream_after(&entry, &mut waiter.load).await;
        drop(waiter);
        let upstream = match ready {
            Ok(upstream) => upstream,
            Err(err) => return error_step(fail(end, err, Outcome::Refused), dialect),
        };
        let answer = match gateway.open(&request, &upstream, &entry).await {
            Ok(answer) => answer,
            Err(err) => return error_step(fail(end, err, Outcome::EngineError), dialect),
        };
        if !answer.status().is_success() {
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap_or_default();
            let mut end = end;
            end.http_status = status;
            let err = GatewayError::new(
                ErrorKind::Engine,
                format!("'{}' refused the request ({status}): {text}", entry.name),
            );
            end.finish(Outcome::Error, &Tally::default(), Some(err.message.clone()));
            return error_step(err, dialect);
        }
        let stall = gateway.options.client_stall;
        next_from(proxy::relay(answer, &request, &entry.name, end, stall)).await
    }
}

fn error_step(err: GatewayError, dialect: Dialect) -> Step {
    Some((Ok(err.sse_event(dialect)), Waiting::Done))
}

async fn next_from(mut relay: Relay) -> Step {
    let item = relay.next().await?;
    Some((item, Waiting::Relaying(Box::new(relay))))
}

/// `: loading model x.gguf on GPU 2–3, 40 % (12 s)` — an SSE comment clients skip.
fn progress_line(entry: &ModelEntry, load: &Load, waited: Duration) -> Bytes {
    let progress = match load {
        Load::Loading { progress: Some(p) } => format!(", {:.0} %", p * 100.0),
        _ => String::new(),
    };
    Bytes::from(format!(
        ": loading model {} on {}{progress} ({} s)\n\n",
        entry.model_file,
        describe_gpus(&entry.gpus()),
        waited.as_secs()
    ))
}
