//! The tuning loop: a saved profile, knobs and values. For each trial the search asks for, the
//! profile's engine is stopped and started again with those values through the supervisor
//! (after the GPUs released the old engine's memory), benchmarked, and judged against the best
//! so far by the noise of the warm runs. Every trial is stored as it ends, OOM and crashes
//! included; the best values can be saved as a new profile. The profile's own engine is
//! brought back afterwards when it was running before.
//!
//! With a quality floor, each trial whose numerics differ from every trial measured before is
//! also measured for KL divergence against the floor's reference, after its speed and with its
//! engine stopped (llama-perplexity loads the model itself): its values go into a temporary
//! saved profile (`rigdeck-tune{id}-trial{n}`, deleted when the run ends, and at the daemon's
//! start when one was left behind), measured as a KLD benchmark run. A trial over the bound is
//! never the best.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::{watch, Notify};

use super::{is_up, knobs, wait_ready, Benchmarks, NewBenchmark, RunKind, Target};
use crate::bench::kld::KldSpec;
use crate::bench::store::tunes::{Best, Trial, TrialKld, TrialOutcome, TuneStore, TuneView};
use crate::bench::store::{Status, StoreError};
use crate::bench::tune::{
    Assignment, Decision, KldFigure, Objective, QualityFloor, Search, TrialScore, TuneSpec, Verdict,
};
use crate::bench::Stats;
use crate::engines::EngineKind;
use crate::events::{Event, EventBus};
use crate::launch::{Instances, LaunchError};
use crate::profiles::profile::{self, LaunchProfile, RestartSetting};
use crate::store::Store;
use crate::supervisor::{CrashCause, Phase};

/// A tuning run to start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTune {
    #[serde(default)]
    pub name: Option<String>,
    /// The saved launch profile whose engine is restarted for each trial.
    pub profile: String,
    pub spec: TuneSpec,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("{0}")]
    Invalid(String),
    #[error("tuning run {0} is in progress: wait for it to end, or cancel it")]
    Busy(i64),
    #[error("tuning run {0} is not running")]
    NotRunning(i64),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Starts, tracks and cancels tuning runs (one at a time: two would measure each other).
pub struct Tunings {
    store: TuneStore,
    benchmarks: Arc<Benchmarks>,
    profiles: Store,
    instances: Arc<Instances>,
    bus: EventBus,
    running: Mutex<Option<(i64, watch::Sender<bool>)>>,
    /// Told each time a tuning has ended and announced how.
    ended: Notify,
    /// The daemon is stopping: a cancelled tuning leaves the profile's engine stopped.
    stopping: AtomicBool,
}

/// How one trial ended, before the search judges it.
struct TrialEnd {
    outcome: TrialOutcome,
    run_id: Option<i64>,
    command_line: Option<String>,
    objective: Option<Stats>,
    error: Option<String>,
}

impl TrialEnd {
    fn failed(outcome: TrialOutcome, error: String) -> Self {
        TrialEnd {
            outcome,
            run_id: None,
            command_line: None,
            objective: None,
            error: Some(error),
        }
    }
}

/// The temporary profiles of one tuning's KLD runs start so (then the tuning's id).
const TRIAL_PROFILE_PREFIX: &str = "rigdeck-tune";

/// `rigdeck-tune7-trial3`: the saved profile a trial's KLD run measures.
fn trial_profile_name(tune: i64, index: u32) -> String {
    format!("{TRIAL_PROFILE_PREFIX}{tune}-trial{index}")
}

/// Whether a profile is a trial's temporary one (left behind by a daemon that stopped mid-run).
fn is_trial_profile(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(TRIAL_PROFILE_PREFIX) else {
        return false;
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    rest.split_once("-trial")
        .is_some_and(|(tune, trial)| numeric(tune) && numeric(trial))
}

/// A tuning's quality floor as it goes: the KL divergences measured so far, each with the
/// numerics it was measured on, and the profile as saved's (the relative bound's base).
struct FloorRun<'a> {
    floor: &'a QualityFloor,
    tune: i64,
    measured: Vec<(LaunchProfile, u32, TrialKld)>,
    base: Option<KldFigure>,
}

/// How a trial's KL divergence came out.
enum KldEnd {
    Measured(TrialKld),
    Failed(String),
    Cancelled,
}

impl Tunings {
    /// Marks tunings a stopped daemon left unfinished as aborted, and deletes the temporary
    /// profiles of KLD runs it left behind.
    pub async fn start(
        benchmarks: Arc<Benchmarks>,
        profiles: Store,
        instances: Arc<Instances>,
        bus: EventBus,
    ) -> Result<Arc<Self>, StoreError> {
        let store = TuneStore::new(profiles.pool().clone());
        store.mark_aborted(crate::now_ms()).await?;
        delete_trial_profiles(&profiles).await;
        Ok(Arc::new(Tunings {
            store,
            benchmarks,
            profiles,
            instances,
            bus,
            running: Mutex::new(None),
            ended: Notify::new(),
            stopping: AtomicBool::new(false),
        }))
    }

    pub fn store(&self) -> &TuneStore {
        &self.store
    }

    /// Checks every value against the profile before any engine restarts, stores the tuning
    /// and starts it in the background.
    pub async fn begin(self: &Arc<Self>, new: NewTune) -> Result<TuneView, TuneError> {
        new.spec.validate().map_err(TuneError::Invalid)?;
        let base = self.profile(&new.profile).await?;
        self.check_values(&base, &new.spec).await?;
        if let Some(floor) = &new.spec.quality_floor {
            self.check_floor(&base, floor).await?;
        }
        let (cancel_tx, cancel_rx) = watch::channel(false);
        // Reserved before the row exists, so two requests at once cannot both start.
        self.reserve(cancel_tx)?;
        let name = new
            .name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| format!("tune {}", base.name));
        let created = self
            .store
            .create(&name, &base.name, &new.spec, crate::now_ms())
            .await;
        let id = match created {
            Ok(id) => id,
            Err(err) => {
                *lock(&self.running) = None;
                return Err(err.into());
            }
        };
        if let Some(slot) = lock(&self.running).as_mut() {
            slot.0 = id;
        }
        let this = self.clone();
        tokio::spawn(async move { this.execute(id, base, new.spec, cancel_rx).await });
        let view = self.store.get(id).await?;
        self.bus.publish(Event::BenchTune(Arc::new(view.clone())));
        Ok(view)
    }

    fn reserve(&self, cancel: watch::Sender<bool>) -> Result<(), TuneError> {
        let mut running = lock(&self.running);
        if let Some((id, _)) = running.as_ref() {
            return Err(TuneError::Busy(*id));
        }
        *running = Some((0, cancel));
        Ok(())
    }

    /// Asks the running tuning to stop; its current trial's benchmark is cancelled.
    pub fn cancel(&self, id: i64) -> Result<(), TuneError> {
        match lock(&self.running).as_ref() {
            Some((running, sender)) if *running == id => {
                let _ = sender.send(true);
                Ok(())
            }
            _ => Err(TuneError::NotRunning(id)),
        }
    }

    /// Deletes a tuning; one still running is cancelled first and deleted once it has stopped
    /// (its trials' benchmark runs stay in the run history).
    pub async fn delete(&self, id: i64) -> Result<(), TuneError> {
        self.cancel_and_wait(id).await;
        self.store.delete(id).await?;
        Ok(())
    }

    /// Cancels the tuning if it is running and waits until it has stored how it ended.
    async fn cancel_and_wait(&self, id: i64) {
        super::cancel_until_ended(&self.ended, || self.cancel(id).is_ok()).await;
    }

    /// Cancels the running tuning (the daemon is stopping) and waits, up to `wait`, until it
    /// has stored how it ended; its engine is not started again.
    pub async fn cancel_all_and_wait(&self, wait: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some((_, sender)) = lock(&self.running).as_ref() {
            let _ = sender.send(true);
        }
        let deadline = Instant::now() + wait;
        while lock(&self.running).is_some() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The saved profile with the tuning's best values, named `name`, for the caller to
    /// validate, plan and save like any new profile.
    pub async fn best_profile(&self, id: i64, name: &str) -> Result<LaunchProfile, TuneError> {
        let view = self.store.get(id).await?;
        let best = view.best.ok_or_else(|| {
            TuneError::Invalid(format!(
                "tuning run {id} has no trial that beat the profile as it was beyond the noise: there is nothing better to save"
            ))
        })?;
        let mut profile = self.profile(&view.profile).await?;
        apply_all(&mut profile, &best.values).map_err(TuneError::Invalid)?;
        profile.name = name.to_owned();
        // The saved plan was for the old values; the caller plans the new ones.
        profile.planned_memory.clear();
        profile.autostart = false;
        profile.gateway.aliases.clear();
        Ok(profile)
    }

    async fn profile(&self, name: &str) -> Result<LaunchProfile, TuneError> {
        self.profiles
            .launch_profile(name)
            .await
            .map_err(|e| TuneError::Invalid(e.to_string()))
    }

    /// Applies every value of every knob to a copy of the profile and validates the copy.
    async fn check_values(&self, base: &LaunchProfile, spec: &TuneSpec) -> Result<(), TuneError> {
        let build = self
            .profiles
            .engine_build(base.engine_build_id)
            .await
            .map_err(|e| TuneError::Invalid(e.to_string()))?;
        for knob in &spec.knobs {
            for value in knob.candidates() {
                let mut variant = base.clone();
                knobs::apply(&mut variant, &knob.name, &value).map_err(TuneError::Invalid)?;
                profile::validate(&variant, build.as_ref(), 0)
                    .map_err(|e| TuneError::Invalid(format!("{} = {value}: {e}", knob.name)))?;
            }
        }
        Ok(())
    }

    /// A floor needs a ready reference and a profile llama-perplexity can run.
    async fn check_floor(
        &self,
        base: &LaunchProfile,
        floor: &QualityFloor,
    ) -> Result<(), TuneError> {
        let build = self
            .profiles
            .engine_build(base.engine_build_id)
            .await
            .map_err(|e| TuneError::Invalid(e.to_string()))?;
        if let Some(build) =
            build.filter(|b| !matches!(b.kind, EngineKind::LlamaCpp | EngineKind::IkLlamaCpp))
        {
            return Err(TuneError::Invalid(format!(
                "a quality floor is measured by llama.cpp's llama-perplexity, and profile '{}' runs {}: tune it without a floor, or tune a llama.cpp profile",
                base.name, build.kind
            )));
        }
        self.benchmarks
            .references()
            .logits(&floor.reference)
            .map_err(|e| TuneError::Invalid(format!("quality floor: {e}")))?;
        Ok(())
    }

    async fn execute(
        self: Arc<Self>,
        id: i64,
        base: LaunchProfile,
        spec: TuneSpec,
        cancel: watch::Receiver<bool>,
    ) {
        let was_running = self.engine_up(&base.name);
        let (status, error) = self.search(id, &base, &spec, cancel).await;
        self.stop_engine(&base.name).await;
        if was_running && !self.stopping.load(Ordering::SeqCst) {
            if let Err(err) = self.instances.start(&base.name, false).await {
                tracing::warn!(
                    "tuning {id}: could not start '{}' again as saved: {err}",
                    base.name
                );
            }
        }
        if let Err(err) = self
            .store
            .finish(id, status, error.as_deref(), crate::now_ms())
            .await
        {
            tracing::warn!("tuning {id}: end not saved: {err}");
        }
        self.announce(id).await;
        *lock(&self.running) = None;
        self.ended.notify_waiters();
    }

    /// Runs the trials the search asks for; how the tuning ended.
    async fn search(
        &self,
        id: i64,
        base: &LaunchProfile,
        spec: &TuneSpec,
        cancel: watch::Receiver<bool>,
    ) -> (Status, Option<String>) {
        let mut search = Search::new(spec.clone());
        let mut trials: Vec<Trial> = Vec::new();
        let mut floor = spec.quality_floor.as_ref().map(|floor| FloorRun {
            floor,
            tune: id,
            measured: Vec::new(),
            base: None,
        });
        while let Some(values) = search.next_trial() {
            if *cancel.borrow() {
                break;
            }
            trials.push(Trial {
                index: trials.len() as u32,
                values: values.clone(),
                outcome: TrialOutcome::Running,
                run_id: None,
                command_line: None,
                objective: None,
                decision: None,
                error: None,
                kld: None,
                started_at_ms: crate::now_ms(),
                finished_at_ms: None,
            });
            self.save(id, &trials, spec.objective).await;
            let index = trials.len() as u32;
            let mut end = self.trial(base, &values, spec, index, cancel.clone()).await;
            let score = match end.objective {
                Some(stats) if end.outcome == TrialOutcome::Measured => TrialScore::Measured(stats),
                _ => TrialScore::Failed,
            };
            let (score, kld, quality_words) = match (&mut floor, score) {
                (Some(floor), TrialScore::Measured(stats)) => {
                    let shown = (stats, end.run_id, spec.objective);
                    let kld = self
                        .floor_trial(floor, &mut trials, shown, base, &values, cancel.clone())
                        .await;
                    if matches!(kld, KldEnd::Cancelled) {
                        end.outcome = TrialOutcome::Cancelled;
                    }
                    judge_quality(floor, stats, kld)
                }
                (_, score) => (score, None, None),
            };
            let decision = (end.outcome != TrialOutcome::Cancelled).then(|| {
                let decision = search.record(&values, &score);
                with_quality_words(decision, quality_words.as_deref(), &score)
            });
            if let (TrialScore::Failed, Some(why)) = (&score, &quality_words) {
                end.error = Some(why.clone());
            }
            if let Some(trial) = trials.last_mut() {
                trial.outcome = end.outcome;
                trial.run_id = end.run_id;
                trial.command_line = end.command_line;
                trial.objective = end.objective;
                trial.error = end.error;
                trial.decision = decision;
                trial.kld = kld;
                trial.finished_at_ms = Some(crate::now_ms());
            }
            self.save(id, &trials, spec.objective).await;
            if end.outcome == TrialOutcome::Cancelled {
                break;
            }
        }
        if *cancel.borrow() {
            return (
                Status::Cancelled,
                Some("cancelled; the trials measured before are kept".into()),
            );
        }
        let baseline_failed = |t: &Trial| {
            t.decision
                .as_ref()
                .is_some_and(|d| d.verdict == Verdict::Failed)
        };
        match trials.first() {
            Some(first) if baseline_failed(first) => (
                Status::Failed,
                Some(format!(
                    "the profile as it is could not be measured, so there is nothing to compare with: {}",
                    first.error.as_deref().unwrap_or("no figure")
                )),
            ),
            _ => (Status::Done, None),
        }
    }

    /// One trial: the engine restarted with the values, benchmarked, stopped.
    async fn trial(
        &self,
        base: &LaunchProfile,
        values: &Assignment,
        spec: &TuneSpec,
        index: u32,
        cancel: watch::Receiver<bool>,
    ) -> TrialEnd {
        let mut variant = base.clone();
        if let Err(why) = apply_all(&mut variant, values) {
            return TrialEnd::failed(TrialOutcome::Failed, why);
        }
        // A crashed trial is an answer, not something to retry.
        variant.restart = RestartSetting::Never;
        if !values.is_empty() {
            // The plan saved with the profile was for its own values: the engine itself says
            // whether the new ones fit (an OOM is recorded as the trial's outcome).
            variant.planned_memory.clear();
        }
        self.stop_engine(&base.name).await;
        // The trial's engine is its own until the trial ends: no idle stop or eviction.
        let _hold = self.instances.hold(&base.name).await;
        if let Err(err) = self.instances.start_variant(variant, false).await {
            return TrialEnd::failed(TrialOutcome::Failed, format!("not started: {err}"));
        }
        let command_line = self
            .instances
            .get(&base.name)
            .and_then(|view| view.command_line);
        let ready = tokio::select! {
            ready = wait_ready(&self.instances, &base.name) => ready,
            () = cancelled(cancel.clone()) => Err("cancelled".into()),
        };
        if let Err(why) = ready {
            let outcome = match *cancel.borrow() {
                true => TrialOutcome::Cancelled,
                false => self.crash_outcome(&base.name),
            };
            self.stop_engine(&base.name).await;
            return TrialEnd {
                command_line,
                ..TrialEnd::failed(outcome, why)
            };
        }
        let bench = NewBenchmark {
            name: Some(format!("{} trial {index}: {}", base.name, describe(values))),
            target: Target::Instance {
                name: base.name.clone(),
            },
            kind: RunKind::Serving,
            spec: spec.bench.clone(),
            probe: Default::default(),
            llama_bench: Default::default(),
            kld: Default::default(),
        };
        let end = self
            .measure(bench, spec.objective, &base.name, cancel)
            .await;
        self.stop_engine(&base.name).await;
        TrialEnd {
            command_line,
            ..end
        }
    }

    /// Under a floor: the trial's speed shown while its KL divergence is measured (or reused).
    async fn floor_trial(
        &self,
        floor: &mut FloorRun<'_>,
        trials: &mut [Trial],
        (stats, run_id, objective): (Stats, Option<i64>, Objective),
        base: &LaunchProfile,
        values: &Assignment,
        cancel: watch::Receiver<bool>,
    ) -> KldEnd {
        let Some(trial) = trials.last_mut() else {
            return KldEnd::Failed("no trial in progress".into());
        };
        trial.objective = Some(stats);
        trial.run_id = run_id;
        let index = trial.index;
        self.save(floor.tune, trials, objective).await;
        self.trial_kld(floor, base, values, index, cancel).await
    }

    /// The trial's KL divergence: an earlier trial's when only knobs that leave the numbers
    /// alone differ from it, else measured now.
    async fn trial_kld(
        &self,
        floor: &mut FloorRun<'_>,
        base: &LaunchProfile,
        values: &Assignment,
        index: u32,
        cancel: watch::Receiver<bool>,
    ) -> KldEnd {
        let numerics = match knobs::numerics_of(base, values) {
            Ok(profile) => profile,
            Err(why) => return KldEnd::Failed(why),
        };
        let earlier = floor
            .measured
            .iter()
            .find(|(profile, _, _)| *profile == numerics);
        if let Some((_, earlier, kld)) = earlier {
            return KldEnd::Measured(TrialKld {
                same_numerics_as: Some(*earlier),
                ..kld.clone()
            });
        }
        let end = self
            .measure_kld(floor.floor, floor.tune, base, values, index, cancel)
            .await;
        if let KldEnd::Measured(kld) = &end {
            floor.measured.push((numerics, index, kld.clone()));
        }
        end
    }

    /// Saves the trial's values as a temporary profile, measures it against the floor's
    /// reference, and deletes the profile whatever happened.
    async fn measure_kld(
        &self,
        floor: &QualityFloor,
        tune: i64,
        base: &LaunchProfile,
        values: &Assignment,
        index: u32,
        cancel: watch::Receiver<bool>,
    ) -> KldEnd {
        let name = trial_profile_name(tune, index);
        let mut variant = base.clone();
        if let Err(why) = apply_all(&mut variant, values) {
            return KldEnd::Failed(why);
        }
        variant.name = name.clone();
        variant.autostart = false;
        variant.restart = RestartSetting::Never;
        variant.gateway.aliases.clear();
        if !values.is_empty() {
            variant.planned_memory.clear();
        }
        if let Err(err) = self
            .profiles
            .create_launch_profile(&variant, crate::now_ms())
            .await
        {
            return KldEnd::Failed(format!("the trial's profile could not be saved: {err}"));
        }
        let bench = NewBenchmark {
            name: Some(format!(
                "{} trial {}: {} — KL divergence",
                base.name,
                index + 1,
                describe(values)
            )),
            target: Target::Profile { name: name.clone() },
            kind: RunKind::Kld,
            spec: Default::default(),
            probe: Default::default(),
            llama_bench: Default::default(),
            kld: KldSpec {
                reference: floor.reference.clone(),
            },
        };
        let ran = self.benchmarks.run_to_end(bench, cancel).await;
        if let Err(err) = self.profiles.delete_launch_profile(&name).await {
            tracing::warn!("tuning {tune}: temporary profile '{name}' not deleted: {err}");
        }
        let run_id = match ran {
            Ok(id) => id,
            Err(err) => return KldEnd::Failed(err.to_string()),
        };
        match self.benchmarks.summary(run_id).await {
            Ok(run) => match (run.status, run.kld) {
                (Status::Done, Some(kld)) => KldEnd::Measured(TrialKld {
                    mean: kld.stats.mean,
                    mean_unc: kld.stats.mean_unc,
                    same_top: kld.stats.same_top,
                    run_id,
                    same_numerics_as: None,
                    bound: None,
                    within: None,
                }),
                (Status::Cancelled, _) => KldEnd::Cancelled,
                _ => KldEnd::Failed(format!(
                    "KLD run {run_id}: {}",
                    run.error.as_deref().unwrap_or("no figure")
                )),
            },
            Err(err) => KldEnd::Failed(err.to_string()),
        }
    }

    /// Benchmarks the ready engine and reads the objective from the stored run.
    async fn measure(
        &self,
        bench: NewBenchmark,
        objective: Objective,
        name: &str,
        cancel: watch::Receiver<bool>,
    ) -> TrialEnd {
        let run_id = match self.benchmarks.run_to_end(bench, cancel).await {
            Ok(id) => id,
            Err(err) => return TrialEnd::failed(TrialOutcome::Failed, err.to_string()),
        };
        let run = match self.benchmarks.store().get(run_id).await {
            Ok(run) => run,
            Err(err) => return TrialEnd::failed(TrialOutcome::Failed, err.to_string()),
        };
        let stats = run.results.first().and_then(|step| objective.of_step(step));
        let (outcome, error) = match run.summary.status {
            Status::Done if stats.is_some() => (TrialOutcome::Measured, None),
            Status::Cancelled => (TrialOutcome::Cancelled, run.summary.error),
            _ if !self.engine_up(name) => (
                self.crash_outcome(name),
                Some(format!(
                    "the engine ended during the benchmark: {}",
                    run.summary.error.as_deref().unwrap_or("no figure")
                )),
            ),
            _ => (
                TrialOutcome::Failed,
                Some(
                    run.summary
                        .error
                        .unwrap_or_else(|| format!("no {} was measured", objective.label())),
                ),
            ),
        };
        TrialEnd {
            outcome,
            run_id: Some(run_id),
            command_line: None,
            objective: stats,
            error,
        }
    }

    fn engine_up(&self, name: &str) -> bool {
        self.instances
            .phase_and_address(name)
            .is_some_and(|(phase, _, _)| is_up(&phase))
    }

    /// Out of memory when the supervisor's reading of the engine's last lines says so.
    fn crash_outcome(&self, name: &str) -> TrialOutcome {
        match self.instances.phase_and_address(name) {
            Some((
                Phase::Crashed {
                    cause: CrashCause::OutOfGpuMemory,
                    ..
                },
                _,
                _,
            )) => TrialOutcome::OutOfMemory,
            _ => TrialOutcome::Crashed,
        }
    }

    async fn stop_engine(&self, name: &str) {
        if !self.engine_up(name) {
            return;
        }
        match self.instances.stop(name).await {
            Ok(_) | Err(LaunchError::NotRunning(_)) => {}
            Err(err) => tracing::warn!("tuning: could not stop '{name}': {err}"),
        }
    }

    async fn save(&self, id: i64, trials: &[Trial], objective: Objective) {
        let best = best_of(trials, objective);
        if let Err(err) = self.store.save_trials(id, trials, best.as_ref()).await {
            tracing::warn!("tuning {id}: trials not saved: {err}");
        }
        self.announce(id).await;
    }

    async fn announce(&self, id: i64) {
        match self.store.get(id).await {
            Ok(view) => self.bus.publish(Event::BenchTune(Arc::new(view))),
            Err(err) => tracing::warn!("tuning {id}: {err}"),
        }
    }
}

/// Deletes the temporary profiles of KLD runs a stopped daemon left behind.
async fn delete_trial_profiles(profiles: &Store) {
    let names = match profiles.launch_profiles().await {
        Ok(all) => all
            .into_iter()
            .map(|p| p.name)
            .filter(|n| is_trial_profile(n)),
        Err(err) => {
            tracing::warn!("tuning: cannot read the profiles to clean up: {err}");
            return;
        }
    };
    for name in names.collect::<Vec<_>>() {
        if let Err(err) = profiles.delete_launch_profile(&name).await {
            tracing::warn!("tuning: temporary profile '{name}' not deleted: {err}");
        }
    }
}

/// The trial's score under the floor, its KLD with the bound it was held to, and the words
/// for its decision (why it failed, when the KLD could not be measured).
fn judge_quality(
    floor: &mut FloorRun<'_>,
    stats: Stats,
    kld: KldEnd,
) -> (TrialScore, Option<TrialKld>, Option<String>) {
    let mut kld = match kld {
        KldEnd::Measured(kld) => kld,
        KldEnd::Failed(why) => {
            return (
                TrialScore::Failed,
                None,
                Some(format!("its KL divergence was not measured: {why}")),
            )
        }
        KldEnd::Cancelled => return (TrialScore::Failed, None, None),
    };
    let figure = KldFigure {
        mean: kld.mean,
        mean_unc: kld.mean_unc,
    };
    if floor.base.is_none() {
        // The first trial is the profile as saved: the base of a relative bound.
        floor.base = Some(figure);
    }
    let Some(check) = floor.floor.check(floor.base.as_ref(), &figure) else {
        return (
            TrialScore::Failed,
            Some(kld),
            Some("no bound: the profile as saved has no KL divergence".into()),
        );
    };
    kld.bound = Some(check.bound);
    kld.within = Some(check.within);
    let reused = kld
        .same_numerics_as
        .map(|t| format!(" (KLD of trial {}: same numerics)", t + 1))
        .unwrap_or_default();
    let words = format!("{}{reused}", check.words);
    let score = if check.within {
        TrialScore::Measured(stats)
    } else {
        TrialScore::BrokeFloor {
            stats,
            reason: words.clone(),
        }
    };
    (score, Some(kld), Some(words))
}

/// The decision with the quality figures behind it added (a trial over the floor has them in
/// its reason already; one whose KLD failed says why instead of the speed's words).
fn with_quality_words(decision: Decision, words: Option<&str>, score: &TrialScore) -> Decision {
    match (score, words) {
        (TrialScore::Measured(_), Some(words)) => Decision {
            reason: format!("{}; quality: {words}", decision.reason),
            ..decision
        },
        (TrialScore::Failed, Some(words)) => Decision {
            reason: words.to_owned(),
            ..decision
        },
        _ => decision,
    }
}

/// The last trial judged better than the best before it (the search's own best), against the
/// baseline; none while nothing beat the baseline beyond the noise.
fn best_of(trials: &[Trial], objective: Objective) -> Option<Best> {
    let baseline = trials.first()?.objective?;
    let best = trials.iter().rev().find(|t| {
        t.decision
            .as_ref()
            .is_some_and(|d| d.verdict == Verdict::Better)
    })?;
    let figure = best.objective?;
    let ratio = figure.median / baseline.median;
    let gain = if objective.higher_is_better() {
        ratio - 1.0
    } else {
        1.0 - ratio
    };
    Some(Best {
        trial: best.index,
        values: best.values.clone(),
        objective: figure,
        baseline,
        gain_percent: if baseline.median > 0.0 {
            gain * 100.0
        } else {
            0.0
        },
        kld: best.kld.clone(),
    })
}

fn apply_all(profile: &mut LaunchProfile, values: &Assignment) -> Result<(), String> {
    values
        .iter()
        .try_for_each(|(knob, value)| knobs::apply(profile, knob, value))
}

/// `threads=8, ubatch=256`, or the baseline's words.
fn describe(values: &Assignment) -> String {
    if values.is_empty() {
        return "as saved".into();
    }
    values
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn cancelled(mut cancel: watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::tune::Decision;

    fn trial(index: u32, median: f64, verdict: Verdict) -> Trial {
        Trial {
            index,
            values: Assignment::from([("threads".to_owned(), index.to_string())]),
            outcome: TrialOutcome::Measured,
            run_id: None,
            command_line: None,
            objective: Stats::of([median - 0.1, median, median + 0.1]),
            decision: Some(Decision {
                verdict,
                reason: String::new(),
            }),
            error: None,
            kld: None,
            started_at_ms: 0,
            finished_at_ms: None,
        }
    }

    #[test]
    fn the_best_is_the_last_win_measured_against_the_baseline() {
        let trials = [
            trial(0, 10.0, Verdict::Baseline),
            trial(1, 12.0, Verdict::Better),
            trial(2, 11.0, Verdict::Worse),
            trial(3, 12.1, Verdict::WithinNoise),
        ];
        let best = best_of(&trials, Objective::AggregateTps).expect("a win");
        assert_eq!(best.trial, 1);
        assert!((best.gain_percent - 20.0).abs() < 1e-9);
        assert!(best_of(&trials[..1], Objective::AggregateTps).is_none());
        let faster = best_of(&trials[..2], Objective::TtftMs).expect("ttft");
        assert!((faster.gain_percent + 20.0).abs() < 1e-9);
    }

    #[test]
    fn only_a_trials_own_profile_name_reads_as_temporary() {
        let name = trial_profile_name(12, 3);
        assert_eq!(name, "rigdeck-tune12-trial3");
        assert!(crate::profiles::profile::check_name(&name).is_ok());
        assert!(is_trial_profile(&name));
        for other in [
            "rigdeck-tune",
            "rigdeck-tune12",
            "rigdeck-tune-trial3",
            "rigdeck-tune12-trial",
            "rigdeck-tuned",
            "rigdeck-tune12-trial3-mine",
            "gemma",
        ] {
            assert!(!is_trial_profile(other), "{other}");
        }
    }

    #[test]
    fn a_trial_over_a_relative_bound_breaks_the_floor_and_a_reused_figure_says_whose() {
        let floor = QualityFloor {
            reference: "r1".into(),
            max_mean_kld: None,
        };
        let mut run = FloorRun {
            floor: &floor,
            tune: 1,
            measured: Vec::new(),
            base: None,
        };
        let stats = Stats::of([10.0, 10.1, 9.9]).expect("stats");
        let kld = |mean: f64, same_numerics_as: Option<u32>| {
            KldEnd::Measured(TrialKld {
                mean,
                mean_unc: 0.0001,
                same_top: 0.99,
                run_id: 5,
                same_numerics_as,
                bound: None,
                within: None,
            })
        };
        let (score, base, _) = judge_quality(&mut run, stats, kld(0.0002, None));
        assert_eq!(score, TrialScore::Measured(stats));
        assert_eq!(base.and_then(|k| k.within), Some(true));
        let (score, reused, words) = judge_quality(&mut run, stats, kld(0.0002, Some(0)));
        assert_eq!(score, TrialScore::Measured(stats));
        assert!(reused.is_some());
        let words = words.expect("words");
        assert!(
            words.ends_with("(KLD of trial 1: same numerics)"),
            "{words}"
        );
        let (score, over, _) = judge_quality(&mut run, stats, kld(0.05, None));
        assert!(matches!(score, TrialScore::BrokeFloor { .. }), "{score:?}");
        assert_eq!(over.and_then(|k| k.within), Some(false));
        let (score, none, words) =
            judge_quality(&mut run, stats, KldEnd::Failed("no reference".into()));
        assert_eq!((score, none), (TrialScore::Failed, None));
        assert!(words.expect("why").contains("no reference"));
    }

    #[test]
    fn values_read_as_a_user_wrote_them() {
        assert_eq!(describe(&Assignment::new()), "as saved");
        let values = Assignment::from([
            ("ubatch".to_owned(), "256".to_owned()),
            ("threads".to_owned(), "8".to_owned()),
        ]);
        assert_eq!(describe(&values), "threads=8, ubatch=256");
    }
}
