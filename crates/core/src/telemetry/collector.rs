//! The collection loop: one task that samples NVML and the host every period, evaluates the
//! findings, publishes the frame, keeps recent history and writes 10 s averages to the database.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::downsample::BucketAverager;
use super::gpu::NvmlSource;
use super::history::{History, HistoryRange, RecentHistory};
use super::host::HostCollector;
use super::snapshot::{RigSample, UnixMillis};
use crate::events::{Event, EventBus, TelemetryFrame};
use crate::settings::Settings;
use crate::store::{Store, StoreError};
use rigdeck_telemetry::findings::{self, Thresholds};

/// Stored history is averaged over this many milliseconds.
pub const BUCKET_MS: i64 = 10_000;
/// Stored history older than this is pruned.
pub const RETENTION_MS: i64 = 7 * 24 * 60 * 60_000;
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// The 24 h view is averaged further so a chart gets about 1 440 points, not 8 640.
const DAY_STEP_MS: i64 = 60_000;

/// Process ids of engines Rigdeck started, with the instance name: VRAM they hold is not
/// "foreign", and the dashboard says which engine holds it.
#[derive(Clone, Default)]
pub struct StartedByRigdeck(Arc<RwLock<HashMap<u32, String>>>);

impl StartedByRigdeck {
    pub fn insert(&self, pid: u32, instance: &str) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pid, instance.to_owned());
    }

    pub fn remove(&self, pid: u32) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&pid);
    }

    fn snapshot(&self) -> HashMap<u32, String> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What a collector reads from: NVML and the host.
pub struct Sources {
    pub nvml: NvmlSource,
    pub host: HostCollector,
}

impl Sources {
    /// Takes one sample of everything. Blocking: NVML and /sys calls can take milliseconds.
    pub fn sample(&mut self, at_ms: UnixMillis, ours: &HashMap<u32, String>) -> RigSample {
        RigSample {
            at_ms,
            gpus: self.nvml.read(ours),
            host: self.host.sample(),
        }
    }
}

/// The running collector: the latest frame, recent history and the stored history.
pub struct TelemetryHandle {
    latest: watch::Receiver<Option<Arc<TelemetryFrame>>>,
    recent: Arc<Mutex<RecentHistory>>,
    store: Option<Store>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl TelemetryHandle {
    pub fn latest(&self) -> Option<Arc<TelemetryFrame>> {
        self.latest.borrow().clone()
    }

    /// Waits until the first frame exists (the collector samples immediately at start).
    pub async fn first_frame(&self) -> Option<Arc<TelemetryFrame>> {
        let mut latest = self.latest.clone();
        latest
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|frame| frame.clone())
    }

    /// History for a range: the last 15 minutes from memory, longer ranges from the database.
    pub async fn history(
        &self,
        range: HistoryRange,
        now: UnixMillis,
    ) -> Result<History, StoreError> {
        let since = now - range.duration_ms();
        let from_memory = |step_ms| {
            self.recent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .history(range, since, step_ms)
        };
        match (range, &self.store) {
            (HistoryRange::FifteenMinutes, _) | (_, None) => Ok(from_memory(1000)),
            (HistoryRange::OneHour, Some(store)) => store.history(range, since, BUCKET_MS).await,
            (HistoryRange::OneDay, Some(store)) => store.history(range, since, DAY_STEP_MS).await,
        }
    }

    /// Stops the loop and writes the bucket in progress. Works while other holders of the
    /// handle (a WebSocket still closing) keep it alive; a second call does nothing.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(Err(err)) = match task {
            Some(task) => Some(task.await),
            None => None,
        } {
            tracing::error!("telemetry collector ended abnormally: {err}");
        }
    }
}

/// Starts the collector task. It samples at once, then every `telemetry_period_ms` of the
/// current settings (a change takes effect on the next tick).
pub fn spawn_collector(
    sources: Sources,
    settings: watch::Receiver<Settings>,
    bus: EventBus,
    store: Option<Store>,
    ours: StartedByRigdeck,
) -> TelemetryHandle {
    let (latest_tx, latest) = watch::channel(None);
    let (stop, stop_rx) = watch::channel(false);
    let recent = Arc::new(Mutex::new(RecentHistory::new(
        HistoryRange::FifteenMinutes.duration_ms(),
    )));
    let collector = Collector {
        sources: Arc::new(Mutex::new(sources)),
        settings,
        bus,
        store: store.clone(),
        ours,
        latest: latest_tx,
        recent: recent.clone(),
        averager: BucketAverager::new(BUCKET_MS),
        thresholds: Thresholds::default(),
    };
    let task = tokio::spawn(collector.run(stop_rx));
    TelemetryHandle {
        latest,
        recent,
        store,
        stop,
        task: Mutex::new(Some(task)),
    }
}

struct Collector {
    sources: Arc<Mutex<Sources>>,
    settings: watch::Receiver<Settings>,
    bus: EventBus,
    store: Option<Store>,
    ours: StartedByRigdeck,
    latest: watch::Sender<Option<Arc<TelemetryFrame>>>,
    recent: Arc<Mutex<RecentHistory>>,
    averager: BucketAverager,
    thresholds: Thresholds,
}

impl Collector {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        self.prune().await;
        let mut period = self.period();
        let mut ticks = interval(period);
        let mut prune_ticks = tokio::time::interval(PRUNE_EVERY);
        prune_ticks.tick().await; // the first tick fires at once; we just pruned
        loop {
            tokio::select! {
                _ = ticks.tick() => self.tick().await,
                _ = prune_ticks.tick() => self.prune().await,
                changed = self.settings.changed() => {
                    if changed.is_err() { break }
                    self.apply_settings();
                    if self.period() != period {
                        period = self.period();
                        ticks = interval(period);
                    }
                }
                _ = stop.changed() => break,
            }
        }
        if let Some(bucket) = self.averager.take() {
            self.write(bucket).await;
        }
    }

    fn period(&self) -> Duration {
        Duration::from_millis(self.settings.borrow().telemetry_period_ms)
    }

    fn apply_settings(&self) {
        let folders: Vec<PathBuf> = self.settings.borrow().library_folders();
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .host
            .set_model_folders(folders);
    }

    async fn tick(&mut self) {
        let sources = self.sources.clone();
        let ours = self.ours.snapshot();
        let at_ms = crate::now_ms();
        let sampled = tokio::task::spawn_blocking(move || {
            sources
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .sample(at_ms, &ours)
        })
        .await;
        let sample = match sampled {
            Ok(sample) => sample,
            Err(err) => {
                tracing::error!("telemetry sample failed: {err}");
                return;
            }
        };
        let findings = findings::evaluate(&sample, &self.thresholds);
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&sample);
        let finished = self.averager.push(&sample);
        let frame = Arc::new(TelemetryFrame { sample, findings });
        self.latest.send_replace(Some(frame.clone()));
        self.bus.publish(Event::TelemetryFrame(frame));
        if let Some(bucket) = finished {
            self.write(bucket).await;
        }
    }

    async fn write(&self, bucket: super::downsample::Bucket) {
        if let Some(store) = &self.store {
            if let Err(err) = store.insert_bucket(&bucket).await {
                tracing::warn!("telemetry history not saved: {err}");
            }
        }
    }

    async fn prune(&self) {
        if let Some(store) = &self.store {
            match store.prune(crate::now_ms() - RETENTION_MS).await {
                Ok(0) => {}
                Ok(rows) => {
                    tracing::info!("pruned {rows} telemetry history rows older than 7 days")
                }
                Err(err) => tracing::warn!("telemetry history not pruned: {err}"),
            }
        }
    }
}

fn interval(period: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(period);
    // After a stall, carry on at the normal pace rather than firing a burst of catch-up samples.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks
}
