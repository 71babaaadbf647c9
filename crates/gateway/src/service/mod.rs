//! The gateway itself: each request checked, routed by its model to a running instance,
//! forwarded, and recorded; what the Gateway page and `/v1/models` show.
//! - [`load`]: a stopped model started on request, and the requests that wait for it;
//! - [`room`]: stopping idle models, to make room for another or past their idle timeout.

mod load;
mod room;

use load::LoadEntry;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde_json::json;
use sqlx::SqlitePool;

use crate::activity::{Activity, InFlight, LastReply};
use crate::clock::now_ms;
use crate::elsewhere::{self, Elsewhere, RemoteModel};
use crate::error::{Dialect, ErrorKind, GatewayError};
use crate::eviction::Eviction;
use crate::fleet::{Fleet, Hold, ModelEntry, ModelState};
use crate::keys::{Caller, KeyError, KeyRing};
use crate::lock;
use crate::metrics::{Metrics, PromText};
use crate::proxy;
use crate::proxy::relay::{EndGuard, Ending};
use crate::proxy::tally::Tally;
use crate::route::{GatewayRequest, Route};
use crate::usage::{self, Outcome, UsageLog, UsageRecord, UsageSummary};

/// The metrics label of requests that name no known model.
const UNKNOWN_MODEL: &str = "unknown";

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
    /// Requests that may wait for one model's load at once (each keeps its body); more get 429.
    pub max_waiters: usize,
    /// How long a request whose engine did not answer watches for the supervisor to notice the
    /// engine is gone (and restart it) before answering 502.
    pub engine_gone_grace: Duration,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            load_timeout: Duration::from_secs(15 * 60),
            progress_every: Duration::from_secs(1),
            poll_every: Duration::from_millis(100),
            client_stall: Duration::from_secs(120),
            max_waiters: 32,
            engine_gone_grace: Duration::from_secs(1),
        }
    }
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
    /// Its last reply since it started, with the decode speed (the dashboard shows it).
    pub last_reply: Option<LastReply>,
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
    loads: Mutex<HashMap<String, LoadEntry>>,
    evictions: Mutex<VecDeque<Eviction>>,
    client: reqwest::Client,
    options: GatewayOptions,
    /// The models of paired rigs (set once the fleet is up).
    elsewhere: std::sync::OnceLock<Arc<dyn Elsewhere>>,
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
            elsewhere: std::sync::OnceLock::new(),
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

    /// Serves the models `elsewhere` lists beside this daemon's own (once; later calls are
    /// ignored).
    pub fn serve_elsewhere(&self, elsewhere: Arc<dyn Elsewhere>) {
        let _ = self.elsewhere.set(elsewhere);
    }

    /// Serves one request on `route` from an authenticated caller: a model of this daemon's,
    /// else one of a paired rig's.
    pub async fn handle(self: &Arc<Self>, route: Route, caller: Caller, body: Bytes) -> Response {
        self.handle_from(route, caller, body, true).await
    }

    /// Serves one request with this daemon's own models only (a desk's request to this rig).
    pub async fn handle_here(
        self: &Arc<Self>,
        route: Route,
        caller: Caller,
        body: Bytes,
    ) -> Response {
        self.handle_from(route, caller, body, false).await
    }

    async fn handle_from(
        self: &Arc<Self>,
        route: Route,
        caller: Caller,
        body: Bytes,
        reach_elsewhere: bool,
    ) -> Response {
        let mut call = Call {
            gateway: self.clone(),
            route,
            caller,
            at_ms: now_ms(),
            started: Instant::now(),
            model: String::new(),
            resolved: false,
            stream: false,
            rig: None,
        };
        let request = match GatewayRequest::parse(route, body) {
            Ok(request) => request,
            Err(err) => return call.refuse(err, Outcome::Refused),
        };
        call.stream = request.stream;
        call.model = request.model.clone();
        let entry = match self.resolve(&request.model).await {
            Ok(entry) => entry,
            Err(err) if err.kind == ErrorKind::ModelNotFound && reach_elsewhere => {
                return self.forward_elsewhere(call, request, err).await
            }
            Err(err) => return call.refuse(err, Outcome::Refused),
        };
        call.model = entry.name.clone();
        call.resolved = true;
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
        // Held from here to the request's end: the idle timer and eviction leave the model
        // alone, and a request that arrives while it is being stopped waits for the stop.
        let in_use = InUse {
            _in_flight: in_flight,
            _hold: self.fleet.hold(&entry.name).await,
        };
        match self.fleet.state(&entry.name) {
            ModelState::Ready(upstream) => {
                let end = call.end_guard(Some(in_use));
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
                let load = match self.join_load(&entry) {
                    Ok(load) => load,
                    Err(err) => return call.refuse(err, Outcome::RateLimited),
                };
                if request.stream {
                    self.stream_after_load(call, request, entry, load, in_use)
                } else {
                    self.answer_after_load(call, request, entry, load, in_use)
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

    /// Forwards to a ready engine; one that does not answer is a 502 in the route's dialect.
    async fn forward(
        self: &Arc<Self>,
        request: &GatewayRequest,
        upstream: &crate::fleet::Upstream,
        entry: &ModelEntry,
        end: EndGuard,
    ) -> Response {
        match self.open(request, upstream, entry).await {
            Ok(answer) => {
                let stall = self.options.client_stall;
                proxy::relay_response(answer, request, &entry.name, end, stall)
            }
            Err(err) => fail(end, err, Outcome::EngineError).response(request.route.dialect()),
        }
    }

    /// The engine's answer (headers read). When the engine did not answer because it just died
    /// (killed, crashed), the supervisor notices within moments and restarts it: the request
    /// then waits for the restart like for a load on request and goes out once more.
    async fn open(
        self: &Arc<Self>,
        request: &GatewayRequest,
        upstream: &crate::fleet::Upstream,
        entry: &ModelEntry,
    ) -> Result<reqwest::Response, GatewayError> {
        let err = match proxy::open(&self.client, request, upstream, &entry.name).await {
            Ok(answer) => return Ok(answer),
            Err(err) => err,
        };
        match self.upstream_after_failure(entry, upstream).await {
            Some(again) => proxy::open(&self.client, request, &again, &entry.name).await,
            None => Err(err),
        }
    }

    /// After `failed` did not answer: the instance's new address once it is ready again (it
    /// was restarting, or restarted elsewhere, or it starts on request and was stopped), or
    /// `None` when it still claims to be ready at the same address after the grace period, or is
    /// stopped or crashed for good.
    async fn upstream_after_failure(
        self: &Arc<Self>,
        entry: &ModelEntry,
        failed: &crate::fleet::Upstream,
    ) -> Option<crate::fleet::Upstream> {
        let deadline = Instant::now() + self.options.engine_gone_grace;
        let poll = self.options.poll_every.min(Duration::from_millis(20));
        loop {
            match self.fleet.state(&entry.name) {
                ModelState::Ready(upstream) if upstream != *failed => return Some(upstream),
                ModelState::Ready(_) if Instant::now() < deadline => {}
                ModelState::Loading { .. } => return self.load_again(entry).await,
                // Stopped or restarted under the request: one started on request starts again.
                ModelState::Stopping | ModelState::Stopped if entry.policy.on_demand => {
                    return self.load_again(entry).await
                }
                _ => return None,
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Waits for the model's load (joining one in progress, or starting one): where it answers
    /// once it is ready.
    async fn load_again(self: &Arc<Self>, entry: &ModelEntry) -> Option<crate::fleet::Upstream> {
        let mut load = self.ensure_loading(entry);
        self.upstream_after(entry, &mut load).await.ok()
    }

    /// A request for a model this daemon does not have, sent to the paired rig that serves it;
    /// `not_here` when none does.
    async fn forward_elsewhere(
        self: &Arc<Self>,
        mut call: Call,
        request: GatewayRequest,
        not_here: GatewayError,
    ) -> Response {
        let Some(elsewhere) = self.elsewhere.get().cloned() else {
            return call.refuse(not_here, Outcome::Refused);
        };
        let remote = self.remote_models(elsewhere.as_ref()).await;
        let Some(remote) = remote.into_iter().find(|m| m.id == request.model) else {
            let err = elsewhere.lost(&request.model).unwrap_or(not_here);
            return call.refuse(err, Outcome::Refused);
        };
        call.model.clone_from(&remote.id);
        call.resolved = true;
        call.rig = Some(remote.model.rig.clone());
        let end = call.end_guard(None);
        let body = request.upstream_body(&remote.model.name);
        match elsewhere.open(&remote.model, request.route, body).await {
            Ok(answer) => {
                let stall = self.options.client_stall;
                proxy::relay_remote(answer, &request, &remote.id, end, stall)
            }
            Err(err) => fail(end, err, Outcome::EngineError).response(request.route.dialect()),
        }
    }

    /// The live rigs' models, named beside this daemon's own names and aliases.
    async fn remote_models(&self, elsewhere: &dyn Elsewhere) -> Vec<RemoteModel> {
        let local = self.fleet.models().await.unwrap_or_default();
        let taken: Vec<&str> = local
            .iter()
            .flat_map(|e| std::iter::once(&e.name).chain(&e.policy.aliases))
            .map(String::as_str)
            .collect();
        elsewhere::name_remote(&taken, elsewhere.models().await)
    }

    /// `/v1/models` of this daemon alone: every profile, and each alias as its own entry.
    pub async fn list_models(&self) -> Response {
        match self.local_listing().await {
            Ok(data) => model_list(data),
            Err(err) => err.response(Dialect::OpenAi),
        }
    }

    /// `/v1/models` with the paired rigs' models after this daemon's own, each saying its rig
    /// (`owned_by` and `rig`).
    pub async fn list_all_models(&self) -> Response {
        let mut data = match self.local_listing().await {
            Ok(data) => data,
            Err(err) => return err.response(Dialect::OpenAi),
        };
        if let Some(elsewhere) = self.elsewhere.get() {
            for remote in self.remote_models(elsewhere.as_ref()).await {
                let rig = &remote.model.rig;
                let status = remote.model.listing.get("status").cloned();
                data.push(json!({"id": remote.id, "object": "model", "created": 0, "owned_by": rig, "rig": rig, "rig_model": remote.model.name, "status": status}));
            }
        }
        model_list(data)
    }

    async fn local_listing(&self) -> Result<Vec<serde_json::Value>, GatewayError> {
        let models = self
            .fleet
            .models()
            .await
            .map_err(|err| GatewayError::new(ErrorKind::Unavailable, err))?;
        let mut data = Vec::new();
        for entry in &models {
            let state = self.fleet.state(&entry.name);
            let status = json!({"value": state.name(), "on_demand": entry.policy.on_demand});
            data.push(json!({"id": entry.name, "object": "model", "created": 0, "owned_by": "rigdeck", "aliases": entry.policy.aliases, "status": status}));
            for alias in &entry.policy.aliases {
                data.push(json!({"id": alias, "object": "model", "created": 0, "owned_by": "rigdeck", "alias_of": entry.name, "status": status}));
            }
        }
        Ok(data)
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
                    last_reply: self.activity.last_reply(&entry.name),
                    name: entry.name,
                }
            })
            .collect();
        Ok(GatewayStatus {
            models: views,
            evictions: lock(&self.evictions).iter().cloned().collect(),
        })
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
    /// Whether `model` names a profile (metrics label only those).
    resolved: bool,
    stream: bool,
    /// The paired rig it went to.
    rig: Option<String>,
}

/// A request's claim on its model: counted against its concurrency limit, and holding the
/// instance so that it is not stopped under the request.
pub(super) struct InUse {
    _in_flight: InFlight,
    _hold: Hold,
}

impl Call {
    /// `in_use`: the local model's claim (`None` for a rig's model: the rig keeps its own).
    fn end_guard(&self, in_use: Option<InUse>) -> EndGuard {
        EndGuard::new(Box::new(RequestEnd {
            gateway: self.gateway.clone(),
            record: self.record(Outcome::Cancelled, 0, None),
            started: self.started,
            _in_use: in_use,
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
            rig: self.rig.clone(),
        }
    }

    /// Answers with `err` and records it.
    fn refuse(&self, err: GatewayError, outcome: Outcome) -> Response {
        let record = self.record(outcome, err.status().as_u16(), Some(err.message.clone()));
        // A name no profile answers to is counted as `unknown`: any key holder could otherwise
        // add a label set per made-up name.
        let label = if self.resolved {
            &record.model
        } else {
            UNKNOWN_MODEL
        };
        self.gateway.metrics.request(label, &record);
        self.gateway.usage.record(record);
        err.response(self.route.dialect())
    }
}

/// Records the request when it ends.
struct RequestEnd {
    gateway: Arc<Gateway>,
    record: UsageRecord,
    started: Instant,
    _in_use: Option<InUse>,
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
        self.gateway.metrics.request(&record.model, &record);
        if let Some(reply) = last_reply(&record) {
            self.gateway.activity.replied(&record.model, reply);
        }
        self.gateway.usage.record(record);
    }
}

/// `/v1/models`' answer for `data`.
fn model_list(data: Vec<serde_json::Value>) -> Response {
    let list = json!({"object": "list", "data": data});
    (StatusCode::OK, axum::Json(list)).into_response()
}

/// A reply that produced tokens at a measured speed, finished or stopped by its client.
fn last_reply(record: &UsageRecord) -> Option<LastReply> {
    let replied = matches!(record.status, Outcome::Ok | Outcome::Cancelled);
    Some(LastReply {
        at_ms: now_ms(),
        decode_tps: record.decode_tps.filter(|_| replied)?,
        completion_tokens: record.completion_tokens,
    })
}

/// Finishes a request that failed before the engine answered; returns the error to send.
fn fail(mut end: EndGuard, err: GatewayError, outcome: Outcome) -> GatewayError {
    end.http_status = err.status().as_u16();
    end.finish(outcome, &Tally::default(), Some(err.message.clone()));
    err
}
