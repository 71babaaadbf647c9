//! "Run this model": one request that takes a model — a hub quantization, a file, or a saved
//! profile — to a ready engine the chat can use: download if needed, the automatic placement on
//! the live rig, a launch profile under the model's name, a start under the usual admission.
//! This module keeps each request's progress (what the UI's progress strip and `rigdeck run`
//! show, published as `model_run.state`) and the rules that need no daemon: the profile's name
//! and the engine build to use. The daemon's API drives the steps.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::engines::registry::{Availability, EngineBuild};
use crate::engines::{Backend, EngineKind};
use crate::events::{Event, EventBus};
use crate::profiles::profile::LaunchProfile;

/// Runs kept for the UI and `GET /model-runs` (older ones are dropped).
const KEPT: usize = 32;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RunSource {
    /// A quantization of a hub repository (the one that fits best when none is named).
    Hub {
        repo: String,
        #[serde(default)]
        quant: Option<String>,
        #[serde(default)]
        revision: Option<String>,
    },
    /// A model file on this machine (any shard of a split GGUF).
    File { path: PathBuf },
    /// A saved launch profile.
    Profile { name: String },
}

impl RunSource {
    /// What the progress strip calls it.
    pub fn title(&self) -> String {
        match self {
            RunSource::Hub {
                repo,
                quant: Some(quant),
                ..
            } => format!("{repo}:{quant}"),
            RunSource::Hub { repo, .. } => repo.clone(),
            RunSource::File { path } => path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into(),
            ),
            RunSource::Profile { name } => name.clone(),
        }
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStep {
    /// Reading the model's headers and planning it on the rig before anything is downloaded.
    Checking,
    Downloading,
    /// The automatic placement and the launch profile.
    Planning,
    Starting,
    /// The engine is reading the model.
    Loading,
    /// The engine answers: the chat can use `model`.
    Ready,
    Failed,
}

impl RunStep {
    pub fn ended(self) -> bool {
        matches!(self, RunStep::Ready | RunStep::Failed)
    }
}

/// What the user can do instead when a run fails: run the quantization that fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFix {
    pub repo: String,
    pub quant: String,
    /// Its verdict in words ("fits on the GPU").
    pub summary: String,
}

/// One run as the UI shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRun {
    pub id: u64,
    pub source: RunSource,
    pub title: String,
    pub step: RunStep,
    /// 0–1 within the step, where the step knows (a download, a model load).
    pub progress: Option<f64>,
    /// The step in words: "downloading 42 % of 241 MiB", "loading on GPU 0–1".
    pub detail: String,
    pub download_id: Option<i64>,
    /// The launch profile used (made by this run when `created_profile`).
    pub profile: Option<String>,
    pub created_profile: bool,
    /// The name the chat and the gateway know it by, once ready.
    pub model: Option<String>,
    /// Where it runs, from the plan: "CPU", "GPU 0–1", "GPU 0 + experts in RAM".
    pub placement: Option<String>,
    pub error: Option<String>,
    pub fix: Option<RunFix>,
    /// Warnings that did not stop the run (a chat template missing, a CPU build on a GPU rig).
    pub notes: Vec<String>,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
}

/// The runs of this daemon, newest last.
#[derive(Clone)]
pub struct ModelRuns {
    runs: Arc<Mutex<VecDeque<ModelRun>>>,
    bus: EventBus,
    /// Held while a run looks for a download or a profile and makes one, so two runs of one
    /// model at once share them instead of making two.
    making: Arc<tokio::sync::Mutex<()>>,
}

impl ModelRuns {
    pub fn new(bus: EventBus) -> Self {
        Self {
            runs: Arc::default(),
            bus,
            making: Arc::default(),
        }
    }

    /// Waits until no other run is finding or making a download or a profile.
    pub async fn making(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.making.clone().lock_owned().await
    }

    /// Records a new run at its first step and announces it.
    pub fn begin(&self, source: RunSource) -> ModelRun {
        let run = {
            let mut runs = self.lock();
            let id = runs.back().map_or(1, |r| r.id + 1);
            let run = ModelRun {
                id,
                title: source.title(),
                source,
                step: RunStep::Checking,
                progress: None,
                detail: "checking the model against this rig".into(),
                download_id: None,
                profile: None,
                created_profile: false,
                model: None,
                placement: None,
                error: None,
                fix: None,
                notes: Vec::new(),
                started_ms: crate::now_ms(),
                ended_ms: None,
            };
            runs.push_back(run.clone());
            while runs.len() > KEPT {
                runs.pop_front();
            }
            run
        };
        self.bus.publish(Event::ModelRun(Arc::new(run.clone())));
        run
    }

    /// Changes run `id` and announces it (nothing once it has ended).
    pub fn update(&self, id: u64, change: impl FnOnce(&mut ModelRun)) -> Option<ModelRun> {
        let run = {
            let mut runs = self.lock();
            let run = runs.iter_mut().find(|r| r.id == id)?;
            if run.step.ended() {
                return Some(run.clone());
            }
            change(run);
            if run.step.ended() {
                run.ended_ms = Some(crate::now_ms());
            }
            run.clone()
        };
        self.bus.publish(Event::ModelRun(Arc::new(run.clone())));
        Some(run)
    }

    /// Moves run `id` to `step` with its words.
    pub fn step(&self, id: u64, step: RunStep, detail: impl Into<String>) {
        let detail = detail.into();
        self.update(id, |run| {
            run.step = step;
            run.progress = None;
            run.detail = detail;
        });
    }

    pub fn get(&self, id: u64) -> Option<ModelRun> {
        self.lock().iter().find(|r| r.id == id).cloned()
    }

    pub fn list(&self) -> Vec<ModelRun> {
        self.lock().iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<ModelRun>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A profile name for a model: the repository's name without `-GGUF`, and the quantization
/// (`gemma-3-270m-it-q4_k_m`), or the file's stem; lower case, in the letters a profile name
/// allows, and not one of `taken`.
pub fn profile_name(source: &RunSource, model: &Path, taken: &[String]) -> String {
    let base = match source {
        RunSource::Hub { repo, quant, .. } => {
            let name = repo.rsplit('/').next().unwrap_or(repo);
            let name = strip_suffix_ignore_case(name, "-gguf");
            match quant {
                Some(quant) => format!("{name}-{quant}"),
                None => file_stem(model),
            }
        }
        RunSource::File { .. } | RunSource::Profile { .. } => file_stem(model),
    };
    let mut base: String = base
        .to_lowercase()
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '-',
        })
        .collect();
    base = base.trim_matches(|c| c == '-' || c == '.').to_owned();
    base.truncate(60);
    if base.is_empty() {
        base = "model".into();
    }
    let mut name = base.clone();
    let mut n = 2;
    while taken.iter().any(|t| t == &name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

fn strip_suffix_ignore_case<'a>(text: &'a str, suffix: &str) -> &'a str {
    let cut = text.len().saturating_sub(suffix.len());
    match (text.get(cut..), text.get(..cut)) {
        (Some(tail), Some(head)) if tail.eq_ignore_ascii_case(suffix) && !head.is_empty() => head,
        _ => text,
    }
}

/// The stem of a model file; a split model's first shard without `-00001-of-00003`; an Ollama
/// blob (no extension) keeps its name.
fn file_stem(model: &Path) -> String {
    let stem = model
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    match stem.rsplit_once("-of-") {
        Some((head, count)) if count.chars().all(|c| c.is_ascii_digit()) => head
            .rsplit_once('-')
            .map_or(head, |(name, _)| name)
            .to_owned(),
        _ => stem,
    }
}

/// The profile of a model saved earlier (the same file), to run again instead of a new one.
pub fn profile_of_model<'a>(
    profiles: &'a [LaunchProfile],
    model: &Path,
) -> Option<&'a LaunchProfile> {
    let wanted = std::fs::canonicalize(model).unwrap_or_else(|_| model.to_owned());
    profiles.iter().find(|p| {
        p.model == model || std::fs::canonicalize(&p.model).is_ok_and(|path| path == wanted)
    })
}

/// The llama.cpp build to run a model with: a CUDA build when the rig has GPUs and one is
/// installed, else the newest CPU build; the error says how to get one.
pub fn choose_build(builds: &[EngineBuild], has_gpus: bool) -> Result<&EngineBuild, String> {
    let usable =
        |b: &&EngineBuild| b.kind == EngineKind::LlamaCpp && b.status == Availability::Ready;
    let newest = |backend: fn(Backend) -> bool| {
        builds
            .iter()
            .filter(usable)
            .filter(|b| backend(b.backend))
            .max_by_key(|b| b.created_at_ms)
    };
    let gpu = newest(|b| b == Backend::Cuda);
    let cpu = newest(|b| b == Backend::Cpu);
    match (has_gpus, gpu, cpu) {
        (true, Some(build), _) => Ok(build),
        (_, _, Some(build)) => Ok(build),
        (false, Some(build), None) => Ok(build),
        _ => Err(
            "no llama.cpp build is ready yet: build one on the Engines page or with \
             `rigdeck engines build` (if a build is running now, run the model again when it is done)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(repo: &str, quant: Option<&str>) -> RunSource {
        RunSource::Hub {
            repo: repo.into(),
            quant: quant.map(Into::into),
            revision: None,
        }
    }

    #[test]
    fn names_come_from_the_repository_and_quantization() {
        let model = Path::new("/c/snap/gemma-3-270m-it-Q4_K_M.gguf");
        let source = hub("unsloth/gemma-3-270m-it-GGUF", Some("Q4_K_M"));
        assert_eq!(profile_name(&source, model, &[]), "gemma-3-270m-it-q4_k_m");
        let taken = vec!["gemma-3-270m-it-q4_k_m".to_owned()];
        assert_eq!(
            profile_name(&source, model, &taken),
            "gemma-3-270m-it-q4_k_m-2"
        );
    }

    #[test]
    fn names_of_files_drop_the_shard_numbers_and_odd_characters() {
        let split = Path::new("/m/GLM-5.2-UD-IQ2_M-00001-of-00006.gguf");
        let file = RunSource::File { path: split.into() };
        assert_eq!(profile_name(&file, split, &[]), "glm-5.2-ud-iq2_m");
        let odd = Path::new("/m/My Model (v2)+.gguf");
        assert_eq!(
            profile_name(&RunSource::File { path: odd.into() }, odd, &[]),
            "my-model--v2"
        );
        let blank = Path::new("/m/---.gguf");
        assert_eq!(
            profile_name(&RunSource::File { path: blank.into() }, blank, &[]),
            "model"
        );
    }

    #[test]
    fn a_run_that_ended_does_not_change() {
        let runs = ModelRuns::new(EventBus::new());
        let run = runs.begin(hub("a/b", None));
        runs.step(run.id, RunStep::Failed, "it failed");
        runs.step(run.id, RunStep::Ready, "ready");
        let ended = runs.get(run.id).map(|r| r.step);
        assert_eq!(ended, Some(RunStep::Failed));
        assert!(runs.get(run.id).is_some_and(|r| r.ended_ms.is_some()));
    }
}
