//! The gateway itself: each request checked, routed by its model to a running instance (started
//! on request where the profile allows, making room by stopping idle models), forwarded, and
//! recorded; plus the idle timer and what the Gateway page and `/v1/models` show.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::json;
use sqlx::SqlitePool;
use tokio::sync::watch;

use crate::activity::{Activity, InFlight};
use crate::clock::now_ms;
use crate::error::{Dialect, ErrorKind, GatewayError};
use crate::eviction::{idle_past_ttl, pick_victim, Candidate, Eviction};
use crate::fleet::{describe_gpus, Fleet, ModelEntry, ModelState, StartError};
use crate::keys::{Caller, KeyError, KeyRing};
use crate::lock;
use crate::metrics::{Metrics, PromText};
use crate::proxy::relay::{EndGuard, Ending, Relay};
use crate::proxy::tally::Tally;
use crate::proxy::{self, stream_headers};
use crate::route::{GatewayRequest, Route};
use crate::usage::{self, Outcome, UsageLog, UsageRecord, UsageSummary};

/// How many evictions the Gateway page keeps.
const EVICTIONS_KEPT: usize = 20;

/// Timings the tests shorten.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// How long a request waits for a model to load before giving up (the engine's own ready
    /// timeout usually ends it first).
    pub load_timeout: Duration,
    /// How often a waiting stream hears about the load's progress.
    pub progress_every: Duration,
    /// How often the state of a loading model is read.
    pub poll_every: Duration,
    /// How long a stream waits for a client that stopped reading before the engine's
    /// connection is closed.
    pub client_stall: Duration,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            load_timeout: Duration::from_secs(15 * 60),
            progress_every: Duration::from_secs(1),
            poll_every: Duration::from_millis(100),
            client_stall: Duration::from_secs(120),
        }
    }
}

/// A load in progress, as waiting requests follow it.
#[derive(Debug, Clone)]
enum Load {
    Loading { progress: Option<f32> },
    Ready,
    Failed(GatewayError),
}

/// A model as the Gateway page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ModelView {
    pub name: String,
    pub aliases: Vec<String>,
    pub state: &'static str,
    pub progress: Option<f32>,
    pub on_demand: bool,
    pub pinned: bool,
    pub idle_ttl_s: Option<u64>,
    pub max_concurrent: Option<u32>,
    pub in_flight: u32,
    pub last_used_at_ms: Option<i64>,
    pub gpus: Vec<u32>,
}

/// What the Gateway page shows.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayStatus {
    pub models: Vec<ModelView>,
    pub evictions: Vec<Eviction>,
}

pub struct Gateway {
    fleet: Arc<dyn Fleet>,
    keys: KeyRing,
    pool: SqlitePool,
    usage: UsageLog,
    metrics: Metrics,
    activity: Arc<Activity>,
    loads: Mutex<HashMap<String, watch::Receiver<Load>>>,
    evictions: Mutex<VecDeque<Eviction>>,
    client: reqwest::Client,
    options: GatewayOptions,
}

impl Gateway {
    /// Loads the keys and starts the usage writer (within a tokio runtime).
    pub async fn new(
        fleet: Arc<dyn Fleet>,
        pool: SqlitePool,
        options: GatewayOptions,
    ) -> Result<Arc<Self>, KeyError> {
        let keys = KeyRing::load(pool.clone()).await?;
        // No overall timeout: a stream may run for an hour. Engines are local.
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .build()
            .map_err(|err| KeyError::Query(sqlx::Error::Protocol(err.to_string())))?;
        Ok(Arc::new(Self {
            fleet,
            keys,
            usage: UsageLog::spawn(pool.clone()),
            pool,
            metrics: Metrics::default(),
            activity: Arc::new(Activity::default()),
            loads: Mutex::new(HashMap::new()),
            evictions: Mutex::new(VecDeque::new()),
            client,
            options,
        }))
    }

    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// Usage in a time range, every request recorded so far included.
    pub async fn usage(&self, from_ms: i64, to_ms: i64) -> Result<UsageSummary, sqlx::Error> {
        self.usage.flushed().await;
        usage::summary(&self.pool, from_ms, to_ms).await
    }

    /// The gateway's Prometheus families.
    pub fn write_metrics(&self, out: &mut PromText) {
        self.metrics
            .write(out, &|model| self.activity.get(model).in_flight);
    }

    /// Serves one request on `route` from an authenticated caller.
    pub async fn handle(self: &Arc<Self>, route: Route, caller: Caller, body: Bytes) -> Response {
        let mut call = Call {
            gateway: self.clone(),
            route,
            caller,
            at_ms: now_ms(),
            started: Instant::now(),
            model: String::new(),
            stream: false,
        };
        let request = match GatewayRequest::parse(route, body) {
            Ok(request) => request,
            Err(err) => return call.refuse(err, Outcome::Refused),
        };
        call.stream = request.stream;
        call.model = request.model.clone();
        let entry = match self.resolve(&request.model).await {
            Ok(entry) => entry,
            Err(err) => return call.refuse(err, Outcome::Refused),
        };
        call.model = entry.name.clone();
        let in_flight = match self
            .activity
            .begin(&entry.name, entry.policy.max_concurrent)
        {
            Ok(in_flight) => in_flight,
            Err(busy) => {
                let mut err = GatewayError::new(
                    ErrorKind::RateLimited,
                    format!(
                        "'{}' is serving its limit of {} requests at once: retry shortly, or raise \"Max concurrent requests\" in its profile",
                        entry.name, busy.limit
                    ),
                );
                err.retry_after_s = Some(1);
                return call.refuse(err, Outcome::RateLimited);
            }
        };
        match self.fleet.state(&entry.name) {
            ModelState::Ready(upstream) => {
                let end = call.end_guard(in_flight);
                self.forward(&request, &upstream, &entry, end).await
            }
            // Loading already (a click on Start, a restart after a crash): wait for it like
            // for a load on request. Stopped without "start on request": say how to start it.
            state @ (ModelState::Stopped | ModelState::Stopping | ModelState::Crashed { .. })
                if !entry.policy.on_demand =>
            {
                let err = GatewayError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "'{}' is {}: start it (`rigdeck run {0}` or the Instances page), or turn on \"Start on request\" in its profile",
                        entry.name,
                        state.name()
                    ),
                );
                call.refuse(err, Outcome::Refused)
            }
            _ => {
                let load = self.ensure_loading(&entry);
                if request.stream {
                    self.stream_after_load(call, request, entry, load, in_flight)
                } else {
                    self.answer_after_load(call, request, entry, load, in_flight)
                        .await
                }
            }
        }
    }

    /// The profile named `model`, or the one with that alias.
    async fn resolve(&self, model: &str) -> Result<ModelEntry, GatewayError> {
        let models = self
            .fleet
            .models()
            .await
            .map_err(|err| GatewayError::new(ErrorKind::Unavailable, err))?;
        if let Some(entry) = models.iter().find(|e| e.answers_to(model)) {
            return Ok(entry.clone());
        }
        let known: Vec<&str> = models.iter().map(|e| e.name.as_str()).collect();
        let hint = if known.is_empty() {
            "there are no launch profiles yet: create one on the Plan or Instances page".to_owned()
        } else {
            format!("known models: {}", known.join(", "))
        };
        Err(GatewayError::new(
            ErrorKind::ModelNotFound,
            format!("no model named '{model}' (a launch profile's name or alias); {hint}"),
        ))
    }

    /// Joins the load of `entry` in progress, or starts one. A burst of first requests thus
    /// starts one instance.
    fn ensure_loading(self: &Arc<Self>, entry: &ModelEntry) -> watch::Receiver<Load> {
        let mut loads = lock(&self.loads);
        if let Some(load) = loads.get(&entry.name) {
            return load.clone();
        }
        let (tx, rx) = watch::channel(Load::Loading { progress: None });
        loads.insert(entry.name.clone(), rx.clone());
        self.metrics.load(&entry.name);
        tokio::spawn(self.clone().load(entry.clone(), tx));
        rx
    }

    /// Runs on its own task, so a client that leaves does not cancel others' wait.
    async fn load(self: Arc<Self>, entry: ModelEntry, tx: watch::Sender<Load>) {
        let outcome = match self.start_making_room(&entry).await {
            Ok(()) => self.wait_ready(&entry, &tx).await,
            Err(err) => Err(err),
        };
        if let Err(err) = &outcome {
            tracing::warn!("gateway: loading '{}' failed: {err}", entry.name);
        }
        tx.send_replace(match outcome {
            Ok(()) => Load::Ready,
            Err(err) => Load::Failed(err),
        });
        lock(&self.loads).remove(&entry.name);
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

    async fn victim_for(&self, target: &str, short: &[(u32, u64)]) -> Option<String> {
        let models = self.fleet.models().await.ok()?;
        let states: Vec<ModelState> = models.iter().map(|e| self.fleet.state(&e.name)).collect();
        let candidates = self.candidates(&models, &states);
        pick_victim(&candidates, target, short).map(|e| e.name.clone())
    }

    fn candidates<'a>(
        &self,
        models: &'a [ModelEntry],
        states: &'a [ModelState],
    ) -> Vec<Candidate<'a>> {
        models
            .iter()
            .zip(states)
            .map(|(entry, state)| Candidate {
                entry,
                state,
                activity: self.activity.get(&entry.name),
            })
            .collect()
    }

    /// Stops a model the policy chose and remembers why.
    async fn stop_model(
        &self,
        name: &str,
        for_model: &str,
        reason: String,
    ) -> Result<(), GatewayError> {
        tracing::info!("gateway: stopping '{name}': {reason}");
        self.fleet.stop(name).await.map_err(|err| {
            GatewayError::new(
                ErrorKind::Unavailable,
                format!("cannot stop '{name}' to make room for '{for_model}': {err}"),
            )
        })?;
        self.activity.stopped(name);
        self.metrics.eviction(name);
        let mut evictions = lock(&self.evictions);
        evictions.push_front(Eviction {
            at_ms: now_ms(),
            evicted: name.to_owned(),
            for_model: for_model.to_owned(),
            reason,
        });
        evictions.truncate(EVICTIONS_KEPT);
        Ok(())
    }

    /// Follows the instance until it is ready, publishing its load progress.
    async fn wait_ready(
        &self,
        entry: &ModelEntry,
        tx: &watch::Sender<Load>,
    ) -> Result<(), GatewayError> {
        let deadline = Instant::now() + self.options.load_timeout;
        loop {
            match self.fleet.state(&entry.name) {
                ModelState::Ready(_) => return Ok(()),
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
                    return Err(GatewayError::new(
                        ErrorKind::Unavailable,
                        format!("'{}' was {} while loading", entry.name, state.name()),
                    ))
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
    async fn answer_after_load(
        self: &Arc<Self>,
        call: Call,
        request: GatewayRequest,
        entry: ModelEntry,
        mut load: watch::Receiver<Load>,
        in_flight: InFlight,
    ) -> Response {
        let dialect = call.route.dialect();
        let end = call.end_guard(in_flight);
        match self.upstream_after(&entry, &mut load).await {
            Ok(upstream) => self.forward(&request, &upstream, &entry, end).await,
            Err(err) => fail(end, err, Outcome::Refused).response(dialect),
        }
    }

    /// Forwards to a ready engine; one that does not answer is a 502 in the route's dialect.
    async fn forward(
        &self,
        request: &GatewayRequest,
        upstream: &crate::fleet::Upstream,
        entry: &ModelEntry,
        end: EndGuard,
    ) -> Response {
        let stall = self.options.client_stall;
        match proxy::forward(&self.client, request, upstream, &entry.name, end, stall).await {
            Ok(response) => response,
            Err((err, end)) => {
                fail(end, err, Outcome::EngineError).response(request.route.dialect())
            }
        }
    }

    /// Waits for a load to end; the ready model's address, or why it failed.
    async fn upstream_after(
        &self,
        entry: &ModelEntry,
        load: &mut watch::Receiver<Load>,
    ) -> Result<crate::fleet::Upstream, GatewayError> {
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
    fn stream_after_load(
        self: &Arc<Self>,
        call: Call,
        request: GatewayRequest,
        entry: ModelEntry,
        load: watch::Receiver<Load>,
        in_flight: InFlight,
    ) -> Response {
        let dialect = call.route.dialect();
        let state = Waiting::Load(Box::new(LoadWait {
            gateway: self.clone(),
            request,
            entry,
            load,
            end: call.end_guard(in_flight),
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

    /// `/v1/models`: every profile, and each alias as its own entry.
    pub async fn list_models(&self) -> Response {
        let models = match self.fleet.models().await {
            Ok(models) => models,
            Err(err) => {
                return GatewayError::new(ErrorKind::Unavailable, err).response(Dialect::OpenAi)
            }
        };
        let mut data = Vec::new();
        for entry in &models {
            let state = self.fleet.state(&entry.name);
            let status = json!({"value": state.name(), "on_demand": entry.policy.on_demand});
            data.push(json!({"id": entry.name, "object": "model", "created": 0, "owned_by": "rigdeck", "aliases": entry.policy.aliases, "status": status}));
            for alias in &entry.policy.aliases {
                data.push(json!({"id": alias, "object": "model", "created": 0, "owned_by": "rigdeck", "alias_of": entry.name, "status": status}));
            }
        }
        (
            StatusCode::OK,
            axum::Json(json!({"object": "list", "data": data})),
        )
            .into_response()
    }

    /// Where a ready model answers (for reading an engine's own properties).
    pub fn upstream(&self, name: &str) -> Option<crate::fleet::Upstream> {
        match self.fleet.state(name) {
            ModelState::Ready(upstream) => Some(upstream),
            _ => None,
        }
    }

    /// What the Gateway page shows.
    pub async fn status(&self) -> Result<GatewayStatus, String> {
        let models = self.fleet.models().await?;
        let views = models
            .into_iter()
            .map(|entry| {
                let state = self.fleet.state(&entry.name);
                let activity = self.activity.get(&entry.name);
                ModelView {
                    gpus: entry.gpus(),
                    state: state.name(),
                    progress: match state {
                        ModelState::Loading { progress } => progress,
                        _ => None,
                    },
                    aliases: entry.policy.aliases,
                    on_demand: entry.policy.on_demand,
                    pinned: entry.policy.pinned,
                    idle_ttl_s: entry.policy.idle_ttl_s,
                    max_concurrent: entry.policy.max_concurrent,
                    in_flight: activity.in_flight,
                    last_used_at_ms: activity.last_used_ms,
                    name: entry.name,
                }
            })
            .collect();
        Ok(GatewayStatus {
            models: views,
            evictions: lock(&self.evictions).iter().cloned().collect(),
        })
    }

    /// Stops models idle past their TTL, every `period`, until the gateway is dropped.
    pub fn spawn_idle_timer(self: &Arc<Self>, period: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(gateway) = weak.upgrade() else { break };
                gateway.stop_idle().await;
            }
        })
    }

    async fn stop_idle(&self) {
        let Ok(models) = self.fleet.models().await else {
            return;
        };
        let now = now_ms();
        let states: Vec<ModelState> = models.iter().map(|e| self.fleet.state(&e.name)).collect();
        for (entry, state) in models.iter().zip(&states) {
            if matches!(state, ModelState::Ready(_)) {
                self.activity.seen_running(&entry.name, now);
            }
        }
        let candidates = self.candidates(&models, &states);
        let idle: Vec<(String, u64)> = idle_past_ttl(&candidates, now)
            .into_iter()
            .map(|e| (e.name.clone(), e.policy.idle_ttl_s.unwrap_or(0)))
            .collect();
        for (name, ttl_s) in idle {
            let reason = format!("idle for {ttl_s} s (its profile's idle timeout)");
            if let Err(err) = self.stop_model(&name, "", reason).await {
                tracing::warn!("gateway: {err}");
            }
        }
    }
}

/// A request's bookkeeping before it has an end guard.
struct Call {
    gateway: Arc<Gateway>,
    route: Route,
    caller: Caller,
    at_ms: i64,
    started: Instant,
    /// The profile once resolved; until then the name the client sent.
    model: String,
    stream: bool,
}

impl Call {
    fn end_guard(&self, in_flight: InFlight) -> EndGuard {
        EndGuard::new(Box::new(RequestEnd {
            gateway: self.gateway.clone(),
            record: self.record(Outcome::Cancelled, 0, None),
            started: self.started,
            _in_flight: in_flight,
        }))
    }

    fn record(&self, status: Outcome, http_status: u16, error: Option<String>) -> UsageRecord {
        UsageRecord {
            at_ms: self.at_ms,
            model: self.model.clone(),
            key_id: self.caller.key_id,
            key_name: self.caller.name.clone(),
            route: self.route.name().to_owned(),
            stream: self.stream,
            status,
            http_status,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
            ttft_ms: None,
            decode_tps: None,
            duration_ms: self.started.elapsed().as_secs_f64() * 1000.0,
            error,
        }
    }

    /// Answers with `err` and records it.
    fn refuse(&self, err: GatewayError, outcome: Outcome) -> Response {
        let record = self.record(outcome, err.status().as_u16(), Some(err.message.clone()));
        self.gateway.metrics.request(&record);
        self.gateway.usage.record(record);
        err.response(self.route.dialect())
    }
}

/// Records the request when it ends.
struct RequestEnd {
    gateway: Arc<Gateway>,
    record: UsageRecord,
    started: Instant,
    _in_flight: InFlight,
}

impl Ending for RequestEnd {
    fn finish(
        self: Box<Self>,
        outcome: Outcome,
        http_status: u16,
        tally: &Tally,
        error: Option<String>,
    ) {
        let mut record = self.record;
        record.status = outcome;
        record.http_status = http_status;
        record.prompt_tokens = tally.prompt_tokens;
        record.completion_tokens = tally.completion_tokens;
        record.cached_tokens = tally.cached_tokens;
        record.ttft_ms = tally
            .first_token
            .map(|t| t.duration_since(self.started).as_secs_f64() * 1000.0);
        record.decode_tps = tally.decode_tps();
        record.duration_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        record.error = error;
        self.gateway.metrics.request(&record);
        self.gateway.usage.record(record);
    }
}

/// Finishes a request that failed before the engine answered; returns the error to send.
fn fail(mut end: EndGuard, err: GatewayError, outcome: Outcome) -> GatewayError {
    end.http_status = err.status().as_u16();
    end.finish(outcome, &Tally::default(), Some(err.message.clone()));
    err
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
    load: watch::Receiver<Load>,
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
        let ended = self.load.wait_for(|l| !matches!(l, Load::Loading { .. }));
        if tokio::time::timeout(wait, ended).await.is_err() {
            let current = self.load.borrow().clone();
            let line = progress_line(&self.entry, &current, self.started.elapsed());
            self.announced = true;
            return Some((Ok(line), Waiting::Load(self)));
        }
        let LoadWait {
            gateway,
            request,
            entry,
            mut load,
            end,
            dialect,
            ..
        } = *self;
        let upstream = match gateway.upstream_after(&entry, &mut load).await {
            Ok(upstream) => upstream,
            Err(err) => return error_step(fail(end, err, Outcome::Refused), dialect),
        };
        let answer = match proxy::open(&gateway.client, &request, &upstream, &entry.name).await {
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
