//! User settings: defaults live in code, the user's `settings.toml` holds only what they changed.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::paths::AppPaths;

/// The slowest and fastest telemetry periods the collectors accept.
pub const TELEMETRY_PERIOD_RANGE_MS: std::ops::RangeInclusive<u64> = 250..=60_000;

/// How many days of gateway usage may be kept: a day to ten years.
pub const USAGE_RETENTION_RANGE_DAYS: std::ops::RangeInclusive<u32> = 1..=3650;

/// The effective settings: defaults with the user's changes applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub telemetry_period_ms: u64,
    pub model_folders: Vec<PathBuf>,
    pub keep_running_in_background: bool,
    /// The host's DRAM bandwidth in GB/s (channels × MT/s × 8 B) as the user typed it, for the
    /// speed ceiling of CPU-resident weights; it wins over Rigdeck's measurement
    /// (`host_memory_bandwidth`). `None`: the measurement is used.
    pub cpu_bandwidth_gb_s: Option<f64>,
    /// Where model downloads go: `None` is the shared Hugging Face cache (`$HF_HUB_CACHE`);
    /// a folder gets the files as the repository names them.
    pub download_folder: Option<PathBuf>,
    /// Days of gateway usage (one row per request) kept; older rows are deleted at start and
    /// once a day.
    pub usage_retention_days: u32,
    /// The first-run page was skipped: the app opens on the dashboard even with no profile.
    pub welcome_skipped: bool,
    /// Disk the recorded reference logits of quality runs may take, in GB (a new recording that
    /// would pass it is refused, naming what to delete).
    pub quality_reference_budget_gb: f64,
}

impl Settings {
    /// The folders the library scans: the model folders, and the download folder when it is
    /// not inside one of them (so a finished download always appears).
    pub fn library_folders(&self) -> Vec<PathBuf> {
        let mut folders = self.model_folders.clone();
        if let Some(downloads) = &self.download_folder {
            if !folders.iter().any(|f| downloads.starts_with(f)) {
                folders.push(downloads.clone());
            }
        }
        folders
    }
}

/// What the user changed; every field absent means "use the default".
/// This is both the file format and the body of a settings update.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsChanges {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry_period_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_folders: Option<Vec<PathBuf>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_running_in_background: Option<bool>,
    /// GB/s; 0 goes back to Rigdeck's measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_bandwidth_gb_s: Option<f64>,
    /// A folder for downloads; the empty path goes back to the Hugging Face cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub download_folder: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_retention_days: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub welcome_skipped: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality_reference_budget_gb: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("telemetry_period_ms {0} is out of range: choose between 250 and 60000 milliseconds")]
    PeriodOutOfRange(u64),
    #[error("cpu_bandwidth_gb_s {0} is not a plausible DRAM bandwidth: give GB/s between 1 and 10000 (e.g. 89.6 for dual-channel DDR5-5600), or 0 to use Rigdeck's measurement")]
    BandwidthOutOfRange(f64),
    #[error(
        "usage_retention_days {0} is out of range: keep between 1 and 3650 days of gateway usage"
    )]
    RetentionOutOfRange(u32),
    #[error("quality_reference_budget_gb {0} is out of range: give between 1 and 100000 GB of disk for reference logits")]
    BudgetOutOfRange(f64),
    #[error("folder '{0}' is not an absolute path: give the full path, e.g. /home/you/models")]
    RelativeFolder(PathBuf),
    #[error("settings file '{path}' is not valid: {reason}; fix or delete it (the defaults are used meanwhile)")]
    BadFile { path: PathBuf, reason: String },
    #[error("cannot write settings file '{path}': {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl SettingsChanges {
    fn validate(&self) -> Result<(), SettingsError> {
        if let Some(period) = self.telemetry_period_ms {
            if !TELEMETRY_PERIOD_RANGE_MS.contains(&period) {
                return Err(SettingsError::PeriodOutOfRange(period));
            }
        }
        if let Some(bandwidth) = self.cpu_bandwidth_gb_s {
            if bandwidth != 0.0 && !(1.0..=10_000.0).contains(&bandwidth) {
                return Err(SettingsError::BandwidthOutOfRange(bandwidth));
            }
        }
        if let Some(days) = self.usage_retention_days {
            if !USAGE_RETENTION_RANGE_DAYS.contains(&days) {
                return Err(SettingsError::RetentionOutOfRange(days));
            }
        }
        if let Some(budget) = self.quality_reference_budget_gb {
            if !(1.0..=100_000.0).contains(&budget) {
                return Err(SettingsError::BudgetOutOfRange(budget));
            }
        }
        let download = self
            .download_folder
            .iter()
            .filter(|f| !f.as_os_str().is_empty());
        if let Some(folder) = self
            .model_folders
            .iter()
            .flatten()
            .chain(download)
            .find(|f| !f.is_absolute())
        {
            return Err(SettingsError::RelativeFolder(folder.clone()));
        }
        Ok(())
    }

    /// Layers `newer` over `self`: a field set in `newer` wins.
    fn merged_with(&self, newer: &SettingsChanges) -> SettingsChanges {
        SettingsChanges {
            telemetry_period_ms: newer.telemetry_period_ms.or(self.telemetry_period_ms),
            model_folders: newer
                .model_folders
                .clone()
                .or_else(|| self.model_folders.clone()),
            keep_running_in_background: newer
                .keep_running_in_background
                .or(self.keep_running_in_background),
            cpu_bandwidth_gb_s: newer.cpu_bandwidth_gb_s.or(self.cpu_bandwidth_gb_s),
            download_folder: newer
                .download_folder
                .clone()
                .or_else(|| self.download_folder.clone()),
            usage_retention_days: newer.usage_retention_days.or(self.usage_retention_days),
            welcome_skipped: newer.welcome_skipped.or(self.welcome_skipped),
            quality_reference_budget_gb: newer
                .quality_reference_budget_gb
                .or(self.quality_reference_budget_gb),
        }
    }
}

/// The settings file and the defaults it overrides.
#[derive(Debug, Clone)]
pub struct SettingsStore {
    path: PathBuf,
    defaults: Settings,
    changes: SettingsChanges,
}

impl SettingsStore {
    /// Loads the user's changes. A broken file is reported and ignored (the defaults apply),
    /// and it is left untouched on disk until the user saves new settings.
    pub fn load(paths: &AppPaths) -> (Self, Option<SettingsError>) {
        let path = paths.settings_file();
        let defaults = default_settings(paths);
        let (changes, problem) = match read_changes(&path) {
            Ok(changes) => (changes, None),
            Err(err) => (SettingsChanges::default(), Some(err)),
        };
        (
            Self {
                path,
                defaults,
                changes,
            },
            problem,
        )
    }

    pub fn current(&self) -> Settings {
        let c = &self.changes;
        Settings {
            telemetry_period_ms: c
                .telemetry_period_ms
                .unwrap_or(self.defaults.telemetry_period_ms),
            model_folders: c
                .model_folders
                .clone()
                .unwrap_or_else(|| self.defaults.model_folders.clone()),
            keep_running_in_background: c
                .keep_running_in_background
                .unwrap_or(self.defaults.keep_running_in_background),
            cpu_bandwidth_gb_s: c
                .cpu_bandwidth_gb_s
                .filter(|gb| *gb != 0.0)
                .or(self.defaults.cpu_bandwidth_gb_s),
            download_folder: c
                .download_folder
                .clone()
                .filter(|f| !f.as_os_str().is_empty())
                .or_else(|| self.defaults.download_folder.clone()),
            usage_retention_days: c
                .usage_retention_days
                .unwrap_or(self.defaults.usage_retention_days),
            welcome_skipped: c.welcome_skipped.unwrap_or(self.defaults.welcome_skipped),
            quality_reference_budget_gb: c
                .quality_reference_budget_gb
                .unwrap_or(self.defaults.quality_reference_budget_gb),
        }
    }

    /// Validates and saves an update, returning the new effective settings.
    pub fn update(&mut self, update: &SettingsChanges) -> Result<Settings, SettingsError> {
        update.validate()?;
        let changes = self.changes.merged_with(update);
        write_changes(&self.path, &changes)?;
        self.changes = changes;
        Ok(self.current())
    }
}

fn read_changes(path: &Path) -> Result<SettingsChanges, SettingsError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(SettingsChanges::default())
        }
        Err(err) => {
            return Err(SettingsError::BadFile {
                path: path.to_owned(),
                reason: err.to_string(),
            });
        }
    };
    let changes: SettingsChanges = toml::from_str(&text).map_err(|err| SettingsError::BadFile {
        path: path.to_owned(),
        reason: err.message().to_owned(),
    })?;
    changes.validate().map_err(|err| SettingsError::BadFile {
        path: path.to_owned(),
        reason: err.to_string(),
    })?;
    Ok(changes)
}

/// Writes through a temporary file and a rename, so a crash never leaves half a settings file.
fn write_changes(path: &Path, changes: &SettingsChanges) -> Result<(), SettingsError> {
    let write_err = |source| SettingsError::Write {
        path: path.to_owned(),
        source,
    };
    let text = toml::to_string(changes).map_err(|err| write_err(std::io::Error::other(err)))?;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(write_err)?;
    }
    let tmp = path.with_extension("toml.tmp");
    fs::write(&tmp, text).map_err(write_err)?;
    fs::rename(&tmp, path).map_err(write_err)
}

fn default_settings(paths: &AppPaths) -> Settings {
    Settings {
        telemetry_period_ms: 1000,
        model_folders: default_model_folders(paths),
        keep_running_in_background: false,
        cpu_bandwidth_gb_s: None,
        download_folder: None,
        usage_retention_days: 90,
        welcome_skipped: false,
        quality_reference_budget_gb: 20.0,
    }
}

/// Rigdeck's own folder, then the caches of the tools our users already run.
fn default_model_folders(paths: &AppPaths) -> Vec<PathBuf> {
    let home = dirs::home_dir();
    let cache = dirs::cache_dir();
    let env_dir = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let hf_hub = env_dir("HF_HUB_CACHE")
        .or_else(|| env_dir("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| cache.as_ref().map(|c| c.join("huggingface/hub")));
    let llama_cache =
        env_dir("LLAMA_CACHE").or_else(|| cache.as_ref().map(|c| c.join("llama.cpp")));
    let lm_studio = home.as_ref().map(|h| h.join(".lmstudio/models"));
    std::iter::once(Some(paths.models_dir()))
        .chain([hf_hub, llama_cache, lm_studio])
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(dir: &Path) -> AppPaths {
        AppPaths {
            config_dir: dir.join("config"),
            data_dir: dir.join("data"),
        }
    }

    #[test]
    fn defaults_apply_until_the_user_changes_something() {
        let dir = tempfile::tempdir().unwrap();
        let (store, problem) = SettingsStore::load(&paths(dir.path()));
        assert!(problem.is_none());
        let current = store.current();
        assert_eq!(current.telemetry_period_ms, 1000);
        assert_eq!(current.model_folders[0], dir.path().join("data/models"));
        assert!(!current.keep_running_in_background);
    }

    #[test]
    fn saves_only_what_changed_and_reloads_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let (mut store, _) = SettingsStore::load(&p);
        let update = SettingsChanges {
            telemetry_period_ms: Some(500),
            ..Default::default()
        };
        assert_eq!(store.update(&update).unwrap().telemetry_period_ms, 500);
        let text = fs::read_to_string(p.settings_file()).unwrap();
        assert_eq!(text.trim(), "telemetry_period_ms = 500");
        let (reloaded, _) = SettingsStore::load(&p);
        assert_eq!(reloaded.current().telemetry_period_ms, 500);
    }

    #[test]
    fn rejects_bad_values_with_the_fix_and_keeps_the_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = SettingsStore::load(&paths(dir.path()));
        let err = store
            .update(&SettingsChanges {
                telemetry_period_ms: Some(10),
                ..Default::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("between 250 and 60000"), "{err}");
        let err = store
            .update(&SettingsChanges {
                model_folders: Some(vec!["models".into()]),
                ..Default::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("absolute"), "{err}");
        assert_eq!(store.current().telemetry_period_ms, 1000);
    }

    #[test]
    fn the_dram_bandwidth_is_checked_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = SettingsStore::load(&paths(dir.path()));
        let bad = SettingsChanges {
            cpu_bandwidth_gb_s: Some(0.5),
            ..Default::default()
        };
        assert!(store.update(&bad).unwrap_err().to_string().contains("89.6"));
        let good = SettingsChanges {
            cpu_bandwidth_gb_s: Some(89.6),
            ..Default::default()
        };
        assert_eq!(store.update(&good).unwrap().cpu_bandwidth_gb_s, Some(89.6));
        let measured = SettingsChanges {
            cpu_bandwidth_gb_s: Some(0.0),
            ..Default::default()
        };
        assert_eq!(
            store.update(&measured).unwrap().cpu_bandwidth_gb_s,
            None,
            "0: back to Rigdeck's measurement"
        );
    }

    #[test]
    fn a_download_folder_is_scanned_by_the_library_and_the_empty_path_goes_back_to_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = SettingsStore::load(&paths(dir.path()));
        assert_eq!(
            store.current().download_folder,
            None,
            "the Hugging Face cache"
        );
        let relative = SettingsChanges {
            download_folder: Some("models".into()),
            ..Default::default()
        };
        assert!(store
            .update(&relative)
            .unwrap_err()
            .to_string()
            .contains("absolute"));
        let elsewhere = dir.path().join("downloads");
        let set = SettingsChanges {
            download_folder: Some(elsewhere.clone()),
            ..Default::default()
        };
        let current = store.update(&set).unwrap();
        assert_eq!(current.download_folder.as_ref(), Some(&elsewhere));
        assert_eq!(current.library_folders().last(), Some(&elsewhere));
        // Inside a model folder it is scanned already.
        let inside = dir.path().join("data/models/downloads");
        let current = store
            .update(&SettingsChanges {
                download_folder: Some(inside),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(current.library_folders(), current.model_folders);
        let back = SettingsChanges {
            download_folder: Some(PathBuf::new()),
            ..Default::default()
        };
        assert_eq!(store.update(&back).unwrap().download_folder, None);
    }

    #[test]
    fn usage_is_kept_90_days_unless_the_user_picks_between_a_day_and_ten_years() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = SettingsStore::load(&paths(dir.path()));
        assert_eq!(store.current().usage_retention_days, 90);
        let none = SettingsChanges {
            usage_retention_days: Some(0),
            ..Default::default()
        };
        let err = store.update(&none).unwrap_err().to_string();
        assert!(err.contains("between 1 and 3650"), "{err}");
        let year = SettingsChanges {
            usage_retention_days: Some(365),
            ..Default::default()
        };
        assert_eq!(store.update(&year).unwrap().usage_retention_days, 365);
    }

    #[test]
    fn a_broken_file_is_reported_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        fs::create_dir_all(&p.config_dir).unwrap();
        fs::write(p.settings_file(), "telemetry_period_ms = \"fast\"").unwrap();
        let (store, problem) = SettingsStore::load(&p);
        let message = problem.unwrap().to_string();
        assert!(
            message.contains("settings.toml") && message.contains("fix or delete"),
            "{message}"
        );
        assert_eq!(store.current().telemetry_period_ms, 1000);
        assert!(fs::read_to_string(p.settings_file())
            .unwrap()
            .contains("fast"));
    }
}
