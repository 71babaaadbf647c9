//! The host's memory bandwidth as the planner uses it: Rigdeck's own measurement (taken at the
//! daemon's first start, kept in the data folder with how it was measured, taken again on
//! request), unless the user typed a value in the settings, which wins.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rigdeck_telemetry::memory_bandwidth::{measure, BandwidthReading, ProbeError, ProbeSize};
use rigdeck_telemetry::snapshot::HostSnapshot;
use serde::{Deserialize, Serialize};

use crate::settings::Settings;

/// The measurement's file in the data folder.
pub const FILE_NAME: &str = "memory-bandwidth.json";

/// A measurement as kept: the reading and when it was taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMeasurement {
    #[serde(flatten)]
    pub reading: BandwidthReading,
    pub measured_at_ms: i64,
}

/// Where the bandwidth the planner uses comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BandwidthSource {
    /// The user's `cpu_bandwidth_gb_s`.
    Settings,
    /// Rigdeck's measurement.
    Measured,
}

/// Everything the settings page shows about the host's memory bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandwidthStatus {
    /// What the planner uses for the CPU's speed ceiling, in bytes per second.
    pub in_use_bytes_per_s: Option<u64>,
    pub source: Option<BandwidthSource>,
    /// The user's value in GB/s, which wins over the measurement.
    pub settings_gb_s: Option<f64>,
    pub measured: Option<StoredMeasurement>,
    /// A measurement is running now.
    pub measuring: bool,
    /// Why the last measurement failed, until one succeeds.
    pub problem: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("the memory bandwidth is being measured already: wait a few seconds for it")]
    AlreadyMeasuring,
    #[error("less than 512 MiB of RAM is available, too little to measure the memory bandwidth apart from the caches: free some memory and measure again")]
    TooLittleMemory,
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("cannot keep the memory bandwidth measurement in '{path}': {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the memory bandwidth probe stopped: {0}")]
    Interrupted(String),
}

/// The measurement kept in one data folder, and the probe that takes it (one at a time).
#[derive(Debug)]
pub struct HostMemoryBandwidth {
    file: PathBuf,
    measured: Mutex<Option<StoredMeasurement>>,
    measuring: AtomicBool,
    problem: Mutex<Option<String>>,
}

impl HostMemoryBandwidth {
    /// The measurement kept in `data_dir`, if one was taken; a file that cannot be read counts
    /// as none (and is replaced by the next measurement).
    pub fn open(data_dir: &Path) -> Self {
        let file = data_dir.join(FILE_NAME);
        let measured = read_measurement(&file);
        Self {
            file,
            measured: Mutex::new(measured),
            measuring: AtomicBool::new(false),
            problem: Mutex::new(None),
        }
    }

    pub fn measured(&self) -> Option<StoredMeasurement> {
        lock(&self.measured).clone()
    }

    /// What the planner's CPU device gets: the user's value if they typed one, else the
    /// measurement.
    pub fn for_planner(&self, settings: &Settings) -> Option<u64> {
        self.in_use(settings).map(|(bytes, _)| bytes)
    }

    fn in_use(&self, settings: &Settings) -> Option<(u64, BandwidthSource)> {
        match settings.cpu_bandwidth_gb_s {
            Some(gb) => Some(((gb * 1e9) as u64, BandwidthSource::Settings)),
            None => self
                .measured()
                .map(|m| (m.reading.bytes_per_s, BandwidthSource::Measured)),
        }
    }

    pub fn status(&self, settings: &Settings) -> BandwidthStatus {
        let in_use = self.in_use(settings);
        BandwidthStatus {
            in_use_bytes_per_s: in_use.map(|(bytes, _)| bytes),
            source: in_use.map(|(_, source)| source),
            settings_gb_s: settings.cpu_bandwidth_gb_s,
            measured: self.measured(),
            measuring: self.measuring.load(Ordering::SeqCst),
            problem: lock(&self.problem).clone(),
        }
    }

    /// Measures on a blocking thread (never on the async runtime), keeps the result and returns
    /// it. One measurement at a time: a second one asked for meanwhile is refused.
    pub async fn measure(
        &self,
        size: Option<ProbeSize>,
    ) -> Result<StoredMeasurement, MeasureError> {
        if self.measuring.swap(true, Ordering::SeqCst) {
            return Err(MeasureError::AlreadyMeasuring);
        }
        let result = self.measure_and_keep(size).await;
        *lock(&self.problem) = result.as_ref().err().map(ToString::to_string);
        self.measuring.store(false, Ordering::SeqCst);
        result
    }

    async fn measure_and_keep(
        &self,
        size: Option<ProbeSize>,
    ) -> Result<StoredMeasurement, MeasureError> {
        let size = size.ok_or(MeasureError::TooLittleMemory)?;
        let reading = tokio::task::spawn_blocking(move || measure(size))
            .await
            .map_err(|e| MeasureError::Interrupted(e.to_string()))??;
        let stored = StoredMeasurement {
            reading,
            measured_at_ms: crate::now_ms(),
        };
        write_measurement(&self.file, &stored).map_err(|source| MeasureError::Write {
            path: self.file.clone(),
            source,
        })?;
        *lock(&self.measured) = Some(stored.clone());
        Ok(stored)
    }

    /// At the daemon's start: measures in the background when no measurement was ever kept,
    /// so the start is not delayed.
    pub fn measure_if_never_measured(self: &Arc<Self>, size: Option<ProbeSize>) {
        if self.measured().is_some() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            match this.measure(size).await {
                Ok(m) => tracing::info!(
                    "host memory read bandwidth: {:.1} GB/s ({} MiB read by {} threads, best of {} passes)",
                    m.reading.bytes_per_s as f64 / 1e9,
                    m.reading.buffer_bytes >> 20,
                    m.reading.threads,
                    m.reading.passes
                ),
                Err(err) => tracing::warn!("{err}"),
            }
        });
    }
}

/// The probe's size for this host as telemetry reads it: available RAM, physical cores (the
/// logical ones where the physical count is unknown).
pub fn probe_size_for(host: &HostSnapshot) -> Option<ProbeSize> {
    let cores = host.cpu.physical_cores.unwrap_or(host.cpu.logical_cores);
    ProbeSize::for_host(host.memory.available_bytes, cores)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read_measurement(file: &Path) -> Option<StoredMeasurement> {
    let text = std::fs::read_to_string(file).ok()?;
    match serde_json::from_str(&text) {
        Ok(m) => Some(m),
        Err(err) => {
            tracing::warn!(
                "ignoring the memory bandwidth measurement in '{}' ({err}): it is measured again",
                file.display()
            );
            None
        }
    }
}

/// Through a temporary file and a rename, so a crash never leaves half a measurement.
fn write_measurement(file: &Path, m: &StoredMeasurement) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension("json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(m).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Option<ProbeSize> {
        Some(ProbeSize {
            buffer_bytes: 4 << 20,
            threads: 2,
            passes: 2,
        })
    }

    /// The defaults, with `gb` typed as the bandwidth.
    fn settings(gb: Option<f64>) -> Settings {
        let dir = tempfile::tempdir().unwrap();
        let paths = crate::paths::AppPaths {
            config_dir: dir.path().join("config"),
            data_dir: dir.path().join("data"),
        };
        let (mut store, _) = crate::settings::SettingsStore::load(&paths);
        store
            .update(&crate::settings::SettingsChanges {
                cpu_bandwidth_gb_s: Some(gb.unwrap_or(0.0)),
                ..Default::default()
            })
            .unwrap()
    }

    #[tokio::test]
    async fn a_measurement_is_kept_with_how_it_was_taken_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let bandwidth = HostMemoryBandwidth::open(dir.path());
        assert_eq!(bandwidth.for_planner(&settings(None)), None);
        let taken = bandwidth.measure(small()).await.unwrap();
        assert_eq!(
            (taken.reading.buffer_bytes, taken.reading.threads),
            (4 << 20, 2)
        );
        assert!(taken.measured_at_ms > 0);
        let reopened = HostMemoryBandwidth::open(dir.path());
        assert_eq!(reopened.measured(), Some(taken.clone()));
        let status = reopened.status(&settings(None));
        assert_eq!(status.source, Some(BandwidthSource::Measured));
        assert_eq!(status.in_use_bytes_per_s, Some(taken.reading.bytes_per_s));
    }

    #[tokio::test]
    async fn the_users_value_wins_over_the_measurement() {
        let dir = tempfile::tempdir().unwrap();
        let bandwidth = HostMemoryBandwidth::open(dir.path());
        bandwidth.measure(small()).await.unwrap();
        let typed = settings(Some(89.6));
        assert_eq!(bandwidth.for_planner(&typed), Some(89_600_000_000));
        let status = bandwidth.status(&typed);
        assert_eq!(status.source, Some(BandwidthSource::Settings));
        assert!(status.measured.is_some(), "the measurement is still shown");
    }

    #[tokio::test]
    async fn measuring_again_replaces_the_kept_one_and_a_failure_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let bandwidth = HostMemoryBandwidth::open(dir.path());
        let first = bandwidth.measure(small()).await.unwrap();
        let bigger = Some(ProbeSize {
            buffer_bytes: 8 << 20,
            threads: 1,
            passes: 1,
        });
        let second = bandwidth.measure(bigger).await.unwrap();
        assert_ne!(first, second);
        assert_eq!(
            HostMemoryBandwidth::open(dir.path()).measured(),
            Some(second)
        );
        let err = bandwidth.measure(None).await.unwrap_err().to_string();
        assert!(err.contains("free some memory"), "{err}");
        let status = bandwidth.status(&settings(None));
        assert_eq!(status.problem.as_deref(), Some(err.as_str()));
        assert!(status.measured.is_some() && !status.measuring);
    }

    #[tokio::test]
    async fn a_broken_file_counts_as_never_measured() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "{ not json").unwrap();
        let bandwidth = Arc::new(HostMemoryBandwidth::open(dir.path()));
        assert_eq!(bandwidth.measured(), None);
        bandwidth.measure_if_never_measured(small());
        for _ in 0..100 {
            if bandwidth.measured().is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(bandwidth.measured().is_some(), "measured at start");
    }
}
