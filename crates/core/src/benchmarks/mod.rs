//! Benchmarks as the daemon runs them: a request names a target and a spec; the run is stored
//! at once (status `running`), its target resolved to an endpoint (a profile started for it),
//! its context recorded (engine build, exact command line, placement, model and quantization,
//! hardware before and after), telemetry sampled each second, every step saved after each of
//! its runs and announced as a `bench.run` event, and its end stored: done, failed, cancelled,
//! or (when the daemon stopped) aborted at the next start. Progress reaches the database
//! through a bounded queue: when the database falls behind, the benchmark waits between runs
//! and the sampler between points, and memory does not grow.

pub mod context;
pub mod kld;
pub mod knobs;
pub mod llama_bench;
pub mod llama_tool;
pub mod target;
pub mod tuning;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Notify};

use crate::bench::kld::{KldResult, KldSpec};
use crate::bench::llama_bench::LlamaBenchSpec;
use crate::bench::quality::{self, Answer, AnswerSink, ProbeSpec};
use crate::bench::store::{BenchStore, NewRun, RunSpec, RunSummary, Status, StoreError};
use crate::bench::{BenchSpec, Endpoint, Outcome, Runner, StepResult, StepSink};
use crate::events::{Event, EventBus};
use crate::launch::instances::InstanceHold;
use crate::launch::instances::READY_TIMEOUT;
use crate::launch::{Instances, LaunchError};
use crate::library::LibraryHandle;
use crate::quality::references::References;
use crate::store::Store;
use crate::supervisor::{Phase, SuperviseError};
use crate::telemetry::TelemetryHandle;
pub use target::Target;

/// A benchmark to start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewBenchmark {
    #[serde(default)]
    pub name: Option<String>,
    pub target: Target,
    /// `serving` (the default) or `quality`.
    #[serde(default)]
    pub kind: RunKind,
    /// A serving benchmark's spec.
    #[serde(default)]
    pub spec: BenchSpec,
    /// A quality probe's spec.
    #[serde(default)]
    pub probe: ProbeSpec,
    /// llama-bench's tests.
    #[serde(default)]
    pub llama_bench: LlamaBenchSpec,
    /// A KL divergence's reference.
    #[serde(default)]
    pub kld: KldSpec,
}

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// Speed: shapes, depths, concurrency or rates, cold and warm runs.
    #[default]
    Serving,
    /// Accuracy: questions with exact answers at temperature 0.
    Quality,
    /// llama.cpp's own pp/tg tests at depth with a profile's flags (no HTTP in between).
    LlamaBench,
    /// The KL divergence of a profile's next-token distribution from a recorded reference's.
    Kld,
}

impl RunKind {
    fn name(self) -> &'static str {
        match self {
            RunKind::Serving => "serving",
            RunKind::Quality => "quality",
            RunKind::LlamaBench => "llama_bench",
            RunKind::Kld => "kld",
        }
    }
}

impl NewBenchmark {
    fn run_spec(&self) -> RunSpec {
        match self.kind {
            RunKind::Serving => RunSpec::Serving(self.spec.clone()),
            RunKind::Quality => RunSpec::Quality(self.probe.clone()),
            RunKind::LlamaBench => RunSpec::LlamaBench(self.llama_bench.clone()),
            RunKind::Kld => RunSpec::Kld(self.kld.clone()),
        }
    }

    fn validate(&self) -> Result<(), String> {
        match self.kind {
            RunKind::Serving => self.spec.validate(),
            RunKind::Quality => self.probe.validate(),
            RunKind::LlamaBench => self.llama_bench.validate(),
            RunKind::Kld => self.kld.validate(),
        }?;
        self.target.check()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Invalid(String),
    #[error("benchmark run {0} is not running")]
    NotRunning(i64),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The daemon's own address and token, for gateway targets.
#[derive(Clone)]
pub struct DaemonAddress {
    pub url: String,
    pub token: String,
}

/// Starts, tracks and cancels benchmark runs.
pub struct Benchmarks {
    store: BenchStore,
    profiles: Store,
    instances: Option<Arc<Instances>>,
    telemetry: Arc<TelemetryHandle>,
    library: LibraryHandle,
    bus: EventBus,
    daemon: DaemonAddress,
    references: Arc<References>,
    /// Cancel switches of the runs in progress.
    running: Mutex<HashMap<i64, watch::Sender<bool>>>,
    /// Told each time a run has ended and announced how.
    ended: Notify,
}

/// The longest a llama-bench run may take (a large model at deep contexts takes a while).
const LLAMA_BENCH_LIMIT: Duration = Duration::from_secs(4 * 3600);

/// How often telemetry is sampled during a run.
const TELEMETRY_EVERY: Duration = Duration::from_secs(1);

/// Progress reports (steps, answers, telemetry points) that may wait for the database.
const PROGRESS_QUEUE: usize = 64;

impl Benchmarks {
    /// Marks runs a stopped daemon left unfinished as aborted.
    pub async fn start(
        profiles: Store,
        instances: Option<Arc<Instances>>,
        telemetry: Arc<TelemetryHandle>,
        library: LibraryHandle,
        bus: EventBus,
        daemon: DaemonAddress,
        references: Arc<References>,
    ) -> Result<Arc<Self>, StoreError> {
        let store = BenchStore::new(profiles.pool().clone());
        store.mark_aborted(crate::now_ms()).await?;
        Ok(Arc::new(Benchmarks {
            store,
            profiles,
            instances,
            telemetry,
            library,
            bus,
            daemon,
            references,
            running: Mutex::new(HashMap::new()),
            ended: Notify::new(),
        }))
    }

    pub fn store(&self) -> &BenchStore {
        &self.store
    }

    /// The recorded quality references (the KLD runs' baselines).
    pub fn references(&self) -> &Arc<References> {
        &self.references
    }

    /// Stores the run and starts it in the background; returns it as stored.
    pub async fn begin(self: &Arc<Self>, new: NewBenchmark) -> Result<RunSummary, BenchError> {
        let created = self.create(&new).await?;
        let id = created.id;
        let this = self.clone();
        tokio::spawn(async move { this.execute(new, created).await });
        let summary = self.summary(id).await?;
        self.bus.publish(Event::BenchRun(Arc::new(summary.clone())));
        Ok(summary)
    }

    /// Runs a benchmark to its end (a tuning trial) and returns its id. `stop` turning true
    /// cancels it, as the run's own cancel does.
    pub async fn run_to_end(
        self: &Arc<Self>,
        new: NewBenchmark,
        mut stop: watch::Receiver<bool>,
    ) -> Result<i64, BenchError> {
        let created = self.create(&new).await?;
        let id = created.id;
        self.announce(id).await;
        let run = self.clone().execute(new, created);
        tokio::pin!(run);
        tokio::select! {
            () = &mut run => return Ok(id),
            Ok(()) = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {
                let _ = self.cancel(id).await;
            }
        }
        run.await;
        Ok(id)
    }

    /// Checks the request, stores the run as running and registers its cancel switch.
    async fn create(&self, new: &NewBenchmark) -> Result<Created, BenchError> {
        new.validate().map_err(BenchError::Invalid)?;
        if let Target::Instance { name } = &new.target {
            target::instance_root(self.instances()?, name).map_err(BenchError::Invalid)?;
        }
        let name = new
            .name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| new.target.label());
        let mut context = self.context(&new.target).await;
        let llama_bench = match new.kind {
            RunKind::LlamaBench => Some(self.llama_bench(new).await?),
            _ => None,
        };
        if let Some(prepared) = &llama_bench {
            context["llama_bench"] = prepared.context();
        }
        let kld = match new.kind {
            RunKind::Kld => Some(self.kld(new).await?),
            _ => None,
        };
        if let Some(prepared) = &kld {
            context["kld"] = prepared.context();
        }
        let id = self
            .store
            .create(NewRun {
                name: &name,
                kind: new.kind.name(),
                target: &new.target.view(),
                spec: &new.run_spec(),
                context: &context,
                exact_prompts: None,
                started_at_ms: crate::now_ms(),
            })
            .await?;
        let (cancel_tx, cancel_rx) = watch::channel(false);
        lock(&self.running).insert(id, cancel_tx);
        Ok(Created {
            id,
            context,
            cancel: cancel_rx,
            llama_bench,
            kld,
        })
    }

    /// Asks a running benchmark to stop; what it measured is kept.
    pub async fn cancel(&self, id: i64) -> Result<(), BenchError> {
        let sender = lock(&self.running).get(&id).cloned();
        let sender = sender.ok_or(BenchError::NotRunning(id))?;
        let _ = sender.send(true);
        Ok(())
    }

    /// Deletes a run; one still running is cancelled first and deleted once it has stopped
    /// (what it measured goes with it).
    pub async fn delete(&self, id: i64) -> Result<(), BenchError> {
        self.cancel_and_wait(id).await;
        self.store.delete(id).await?;
        Ok(())
    }

    /// Cancels the run if it is running and waits until it has stored how it ended.
    async fn cancel_and_wait(&self, id: i64) {
        cancel_until_ended(&self.ended, || {
            lock(&self.running)
                .get(&id)
                .map(|sender| sender.send_replace(true))
                .is_some()
        })
        .await;
    }

    /// Cancels every run (the daemon is stopping) and waits, up to `wait`, until each has
    /// stored how it ended.
    pub async fn cancel_all_and_wait(&self, wait: Duration) {
        for sender in lock(&self.running).values() {
            let _ = sender.send(true);
        }
        let deadline = Instant::now() + wait;
        while !lock(&self.running).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn summary(&self, id: i64) -> Result<RunSummary, StoreError> {
        self.store.summary(id).await
    }

    fn instances(&self) -> Result<&Arc<Instances>, BenchError> {
        self.instances.as_ref().ok_or_else(|| {
            BenchError::Invalid("engine instances are unavailable (no database)".into())
        })
    }

    async fn execute(self: Arc<Self>, new: NewBenchmark, created: Created) {
        let Created {
            id,
            mut context,
            cancel,
            llama_bench,
            kld,
        } = created;
        let (writer, progress) = mpsc::channel(PROGRESS_QUEUE);
        let saver = tokio::spawn(self.clone().save_progress(id, progress));
        let sampler = tokio::spawn(sample_telemetry(self.telemetry.clone(), writer.clone()));
        let (outcome, started_profile) = match (llama_bench, kld) {
            // Their results are stored at the end, not streamed: the saver has nothing to wait for.
            (Some(prepared), _) => {
                drop(writer);
                (self.run_llama_bench(id, &prepared, cancel).await, None)
            }
            (None, Some(prepared)) => {
                drop(writer);
                (self.run_kld(id, &prepared, cancel).await, None)
            }
            (None, None) => self.measure(id, &new, writer, cancel).await,
        };
        sampler.abort();
        let _ = saver.await;
        let after = self.telemetry.latest();
        context["hardware_after"] = context::hardware(after.as_ref().map(|f| &f.sample));
        if let Err(err) = self.store.set_context(id, &context).await {
            tracing::warn!("benchmark {id}: context not saved: {err}");
        }
        // Stopped as it was found, unless something else (a request, a reply) uses it now.
        if let (Some(name), Ok(instances)) = (started_profile, self.instances()) {
            if let Err(err) = instances.stop_if_unheld(&name).await {
                tracing::warn!("benchmark {id}: could not stop '{name}' after the run: {err}");
            }
        }
        let (status, error) = match outcome {
            Outcome::Done => (Status::Done, None),
            Outcome::Failed(why) => (Status::Failed, Some(why)),
            Outcome::Cancelled => (
                Status::Cancelled,
                Some("cancelled; the runs measured before are kept".to_owned()),
            ),
        };
        if let Err(err) = self
            .store
            .finish(id, status, error.as_deref(), crate::now_ms())
            .await
        {
            tracing::warn!("benchmark {id}: end not saved: {err}");
        }
        self.announce(id).await;
        lock(&self.running).remove(&id);
        self.ended.notify_waiters();
    }

    /// Resolves the target (starting a profile when asked) and runs the benchmark. Returns how
    /// it ended and the profile it started, if any (to be stopped after).
    async fn measure(
        &self,
        id: i64,
        new: &NewBenchmark,
        writer: mpsc::Sender<Progress>,
        mut cancel: watch::Receiver<bool>,
    ) -> (Outcome, Option<String>) {
        // The instance measured is held for the whole run: the gateway's idle timer and its
        // eviction leave it alone (the run talks to the engine directly, so the gateway would
        // otherwise see it idle).
        let _hold = self.hold_target(&new.target).await;
        let resolved = tokio::select! {
            resolved = self.endpoint(&new.target) => resolved,
            Ok(_) = cancel.wait_for(|c| *c) => return (Outcome::Cancelled, None),
        };
        let (endpoint, started) = match resolved {
            Ok(resolved) => resolved,
            Err((why, started)) => return (Outcome::Failed(why), started),
        };
        let sink = ChannelSink(writer);
        if new.kind == RunKind::Quality {
            return (
                probe_quality(&endpoint, &new.probe, &sink, cancel).await,
                started,
            );
        }
        let mut runner = match Runner::prepare(endpoint, new.spec.clone()).await {
            Ok(runner) => runner,
            Err(why) => return (Outcome::Failed(why), started),
        };
        if let Err(err) = self
            .store
            .set_exact_prompts(id, runner.exact_prompts())
            .await
        {
            tracing::warn!("benchmark {id}: {err}");
        }
        (runner.run(&sink, cancel).await, started)
    }

    async fn llama_bench(&self, new: &NewBenchmark) -> Result<llama_bench::Prepared, BenchError> {
        llama_bench::prepare(
            &self.profiles,
            self.instances.as_deref(),
            &new.target,
            &new.llama_bench,
        )
        .await
        .map_err(BenchError::Invalid)
    }

    async fn kld(&self, new: &NewBenchmark) -> Result<kld::Prepared, BenchError> {
        kld::prepare(
            &self.profiles,
            self.instances.as_deref(),
            &self.references,
            &new.target,
            &new.kld,
        )
        .await
        .map_err(BenchError::Invalid)
    }

    /// Runs llama-perplexity against the reference and stores its figures.
    async fn run_kld(
        &self,
        id: i64,
        prepared: &kld::Prepared,
        cancel: watch::Receiver<bool>,
    ) -> Outcome {
        let stopped = cancel.clone();
        let total = prepared.chunks;
        if let Err(err) = self.store.set_progress(id, 0, total).await {
            tracing::warn!("benchmark {id}: {err}");
        }
        // Windows done, as llama-perplexity prints them: stored and announced as they move.
        let (done_tx, mut done_rx) = watch::channel(0u32);
        let report = async {
            while done_rx.changed().await.is_ok() {
                let done = *done_rx.borrow_and_update();
                if self.store.set_progress(id, done, total).await.is_ok() {
                    self.announce(id).await;
                }
            }
        };
        // The sender moves into the callback: the report ends when the run does.
        let run = crate::bench::kld::run::run(&prepared.argv, &prepared.env, cancel, move |p| {
            let done = (p.fraction.unwrap_or(0.0) * f64::from(total)).floor() as u32;
            done_tx.send_if_modified(|d| std::mem::replace(d, done) != done);
        });
        let (ran, ()) = tokio::join!(run, report);
        let done = match ran {
            Ok(done) if done.success => done,
            Ok(done) => return Outcome::Failed(crate::quality::recording::failure_words(&done)),
            Err(_) if *stopped.borrow() => return Outcome::Cancelled,
            Err(why) => return Outcome::Failed(why),
        };
        let stats = match crate::bench::kld::printout::parse_stats(&done.stdout) {
            Ok(stats) => stats,
            Err(why) => {
                return Outcome::Failed(format!(
                    "{why}. Last lines:\n{}",
                    crate::bench::kld::run::last_lines(&done.stderr, 8)
                ))
            }
        };
        let result = KldResult {
            reference: prepared.reference.id.clone(),
            summary: crate::bench::kld::plain_words(&stats),
            stats,
            scored_tokens: prepared.scored_tokens,
            context: prepared.context,
            chunks: prepared.chunks,
            wall_s: done.wall_s,
        };
        match self.store.save_kld(id, &result).await {
            Ok(()) => Outcome::Done,
            Err(err) => Outcome::Failed(format!("the results could not be stored: {err}")),
        }
    }

    /// Runs llama-bench to its end and stores its tests.
    async fn run_llama_bench(
        &self,
        id: i64,
        prepared: &llama_bench::Prepared,
        cancel: watch::Receiver<bool>,
    ) -> Outcome {
        let stopped = cancel.clone();
        let ran = crate::bench::llama_bench::run(
            &prepared.argv,
            &prepared.env,
            cancel,
            LLAMA_BENCH_LIMIT,
        )
        .await;
        match ran {
            Ok(run) => match self.store.save_tests(id, &run.tests).await {
                Ok(()) => Outcome::Done,
                Err(err) => Outcome::Failed(format!("the results could not be stored: {err}")),
            },
            Err(_) if *stopped.borrow() => Outcome::Cancelled,
            Err(why) => Outcome::Failed(why),
        }
    }

    /// A hold on the instance a target names (a profile, an instance, or the profile a gateway
    /// model resolves to); none for an outside URL.
    async fn hold_target(&self, target: &Target) -> Option<InstanceHold> {
        let instances = self.instances.as_ref()?;
        let name = match target {
            Target::Profile { name } | Target::Instance { name } => name.clone(),
            Target::Gateway { model } => target::profile_for(&self.profiles, model).await?.name,
            Target::Url { .. } => return None,
        };
        Some(instances.hold(&name).await)
    }

    /// The endpoint for a target; a profile that is not running is started and waited for.
    async fn endpoint(
        &self,
        target: &Target,
    ) -> Result<(Endpoint, Option<String>), (String, Option<String>)> {
        let failed = |why: String| (why, None);
        match target {
            Target::Url {
                url,
                api_key,
                model,
            } => Ok((
                Endpoint {
                    base_url: url.trim_end_matches('/').to_owned(),
                    api_key: api_key.clone(),
                    model: model.clone(),
                    engine: crate::bench::EngineKind::Other,
                    engine_url: None,
                    engine_key: None,
                },
                None,
            )),
            Target::Gateway { model } => {
                let profile = target::profile_for(&self.profiles, model).await;
                let instances = self.instances().map_err(|e| failed(e.to_string()))?;
                let root = profile
                    .as_ref()
                    .and_then(|p| target::instance_root(instances, &p.name).ok());
                let engine = self.engine_of(profile.as_ref()).await;
                Ok((
                    Endpoint {
                        base_url: format!("{}/v1", self.daemon.url),
                        api_key: Some(self.daemon.token.clone()),
                        model: model.clone(),
                        engine,
                        engine_key: profile
                            .as_ref()
                            .and_then(|p| instances.engine_api_key(&p.name)),
                        engine_url: root,
                    },
                    None,
                ))
            }
            Target::Instance { name } => {
                let instances = self.instances().map_err(|e| failed(e.to_string()))?;
                let root = target::instance_root(instances, name).map_err(failed)?;
                let profile = target::profile_for(&self.profiles, name).await;
                let engine = self.engine_of(profile.as_ref()).await;
                Ok((
                    target::engine_endpoint(&root, name, engine, instances.engine_api_key(name)),
                    None,
                ))
            }
            Target::Profile { name } => {
                let instances = self.instances().map_err(|e| failed(e.to_string()))?;
                let profile = target::profile_for(&self.profiles, name)
                    .await
                    .ok_or_else(|| {
                        failed(format!(
                            "no launch profile named '{name}': `rigdeck profiles list` shows them"
                        ))
                    })?;
                let started = if target::instance_root(instances, name).is_ok() {
                    None
                } else {
                    match instances.start(name, false).await {
                        Ok(_) => Some(name.clone()),
                        // Being started already (a request, a click): used, not owned.
                        Err(LaunchError::Supervise(SuperviseError::AlreadyRunning { .. })) => None,
                        Err(e) => {
                            return Err(failed(format!(
                                "could not start '{name}' for the run: {e}"
                            )))
                        }
                    }
                };
                let root = wait_ready(instances, name)
                    .await
                    .map_err(|why| (why, started.clone()))?;
                let engine = self.engine_of(Some(&profile)).await;
                Ok((
                    target::engine_endpoint(&root, name, engine, instances.engine_api_key(name)),
                    started,
                ))
            }
        }
    }

    async fn engine_of(
        &self,
        profile: Option<&crate::profiles::profile::LaunchProfile>,
    ) -> crate::bench::EngineKind {
        let Some(profile) = profile else {
            return crate::bench::EngineKind::Other;
        };
        match self.profiles.engine_build(profile.engine_build_id).await {
            Ok(Some(build)) => target::bench_engine(build.kind),
            _ => crate::bench::EngineKind::Other,
        }
    }

    /// The context known before the run: target, engine, command line, model, hardware.
    async fn context(&self, target: &Target) -> Value {
        let before = self.telemetry.latest();
        let mut context = json!({
            "target": target.view(),
            "hardware_before": context::hardware(before.as_ref().map(|f| &f.sample)),
        });
        let name = match target {
            Target::Instance { name } | Target::Profile { name } => Some(name.clone()),
            Target::Gateway { model } => target::profile_for(&self.profiles, model)
                .await
                .map(|p| p.name),
            Target::Url { .. } => None,
        };
        let Some(name) = name else { return context };
        let Some(profile) = target::profile_for(&self.profiles, &name).await else {
            return context;
        };
        context["profile"] = json!(profile.name);
        context["placement"] = json!(profile.placement);
        context["planned_memory"] = json!(profile.planned_memory);
        context["extra_args"] = json!(profile.extra_args);
        if let Ok(Some(build)) = self.profiles.engine_build(profile.engine_build_id).await {
            context["engine"] = json!({
                "id": build.id, "kind": build.kind, "version": build.version,
                "backend": build.backend, "location": build.location,
            });
        }
        context["model"] = self.model_facts(&profile.model);
        if let Some(view) = self.instances.as_ref().and_then(|i| i.get(&name)) {
            context["command_line"] = json!(view.command_line);
            context["measured_memory"] = json!(view.measured_memory);
        }
        context
    }

    fn model_facts(&self, path: &std::path::Path) -> Value {
        let entries = self.library.entries();
        let entry = entries.iter().find(|e| e.path == path);
        let gguf = entry.and_then(|e| e.gguf.as_ref());
        json!({
            "file": path,
            "size_bytes": entry.map(|e| e.size_bytes),
            "architecture": gguf.and_then(|g| g.architecture.clone()),
            "parameters": gguf.map(|g| g.parameter_count),
            "quantization": gguf.and_then(|g| g.file_type.as_ref()).map(|f| f.label.clone()),
            // Two decimals, as every page prints it.
            "bits_per_weight": gguf
                .and_then(|g| g.bits_per_weight)
                .map(|bpw| (bpw * 100.0).round() / 100.0),
        })
    }

    /// Writes the reports in the order they come; announces each step and answer.
    async fn save_progress(self: Arc<Self>, id: i64, mut progress: mpsc::Receiver<Progress>) {
        while let Some(report) = progress.recv().await {
            let saved = match &report {
                Progress::Step(step) => self.store.save_step(id, step).await,
                Progress::Answers(answers) => self.store.save_answers(id, answers).await,
                Progress::Telemetry(point) => self.store.add_telemetry(id, point).await,
            };
            if let Err(err) = saved {
                tracing::warn!("benchmark {id}: progress not saved: {err}");
            }
            if !matches!(report, Progress::Telemetry(_)) {
                self.announce(id).await;
            }
        }
    }

    async fn announce(&self, id: i64) {
        match self.summary(id).await {
            Ok(summary) => self.bus.publish(Event::BenchRun(Arc::new(summary))),
            Err(err) => tracing::warn!("benchmark {id}: {err}"),
        }
    }
}

/// A run as stored before it starts: its id, context, cancel switch and, for llama-bench, the
/// command checked when the run was asked for.
struct Created {
    id: i64,
    context: Value,
    cancel: watch::Receiver<bool>,
    llama_bench: Option<llama_bench::Prepared>,
    kld: Option<kld::Prepared>,
}

/// What the saver task stores as a run goes.
enum Progress {
    Step(Box<StepResult>),
    Answers(Vec<Answer>),
    Telemetry(Value),
}

/// Steps and answers to the saver task, waiting while its queue is full.
struct ChannelSink(mpsc::Sender<Progress>);

impl StepSink for ChannelSink {
    async fn step(&self, step: &StepResult) {
        // Fails only once the saver has ended (the run is over): nothing is left to store.
        let _ = self.0.send(Progress::Step(Box::new(step.clone()))).await;
    }
}

impl AnswerSink for ChannelSink {
    async fn answers(&self, answers: &[Answer]) {
        let _ = self.0.send(Progress::Answers(answers.to_vec())).await;
    }
}

/// Asks the quality probe's questions; fails when no question got an answer through.
async fn probe_quality(
    endpoint: &Endpoint,
    spec: &ProbeSpec,
    sink: &ChannelSink,
    cancel: watch::Receiver<bool>,
) -> Outcome {
    let (answers, cancelled) = quality::probe(endpoint, spec, sink, cancel).await;
    if cancelled {
        return Outcome::Cancelled;
    }
    match answers.iter().find_map(|a| a.error.clone()) {
        Some(error) if answers.iter().all(|a| a.error.is_some()) => {
            Outcome::Failed(format!("no question got an answer: {error}"))
        }
        _ => Outcome::Done,
    }
}

/// Calls `cancel` (which says whether the run was still there to cancel) until the run is gone,
/// waiting for `ended` between calls; registered before each call, so an end in between is not
/// missed.
pub(crate) async fn cancel_until_ended(ended: &Notify, mut cancel: impl FnMut() -> bool) {
    loop {
        let notified = ended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !cancel() {
            return;
        }
        notified.await;
    }
}

/// Waits until a profile's instance is ready; its root URL, or why it never became ready.
pub(crate) async fn wait_ready(instances: &Instances, name: &str) -> Result<String, String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match instances.phase_and_address(name) {
            Some((Phase::Ready, _, _)) => return target::instance_root(instances, name),
            Some((Phase::Crashed { explanation, .. }, _, _)) => {
                return Err(format!("'{name}' crashed while loading: {explanation}"))
            }
            Some((Phase::Stopped, _, _)) | None => {
                return Err(format!("'{name}' stopped before it was ready"))
            }
            _ if Instant::now() > deadline => {
                return Err(format!(
                    "'{name}' was not ready after {} s",
                    READY_TIMEOUT.as_secs()
                ))
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Whether an instance in this phase holds (or is about to hold) its engine's resources.
pub(crate) fn is_up(phase: &Phase) -> bool {
    !matches!(phase, Phase::Stopped | Phase::Crashed { .. })
}

/// A telemetry point each second, from the collector's latest frame, to the saver task.
async fn sample_telemetry(telemetry: Arc<TelemetryHandle>, writer: mpsc::Sender<Progress>) {
    let start = crate::now_ms();
    let mut tick = tokio::time::interval(TELEMETRY_EVERY);
    // A point late for the database is skipped, not queued behind it.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if let Some(frame) = telemetry.latest() {
            let point = context::telemetry_point(&frame.sample, crate::now_ms() - start);
            if writer.send(Progress::Telemetry(point)).await.is_err() {
                return;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod store_writes;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_progress_queue_makes_the_benchmark_wait_instead_of_growing() {
        let (writer, _unread) = mpsc::channel(PROGRESS_QUEUE);
        let sink = ChannelSink(writer);
        let step = StepResult {
            index: 0,
            point: BenchSpec::default().points()[0],
            runs: Vec::new(),
            summary: None,
            complete: false,
        };
        for _ in 0..PROGRESS_QUEUE {
            sink.step(&step).await;
        }
        let next = sink.step(&step);
        tokio::pin!(next);
        let waits = tokio::select! {
            biased;
            () = &mut next => false,
            () = std::future::ready(()) => true,
        };
        assert!(
            waits,
            "a report past {PROGRESS_QUEUE} unsaved ones waits for the saver"
        );
    }
}
