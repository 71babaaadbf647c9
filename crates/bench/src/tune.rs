//! The tuning loop's search and its decisions, apart from any engine: which knob values to try
//! next (walk each knob upward from the best so far and stop when the curve gets worse, or
//! sweep the whole grid), and whether a trial beat the best so far by more than the noise its
//! warm runs showed, and — with a quality floor — whether its KL divergence from a recorded
//! reference stays under the bound (a trial over it is never the best, however fast). The daemon
//! applies the values to a profile, restarts the engine, measures and reports each trial's
//! outcome back here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::result::StepResult;
use crate::spec::BenchSpec;
use crate::stats::{beats_noise, Stats};

/// One knob and the values to try, in the order given (a walk goes through them upward).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knob {
    /// A setting (`threads`, `ubatch`, `n_cpu_moe`, …) or any engine flag (`--draft-max`).
    pub name: String,
    #[serde(default, deserialize_with = "values_as_text")]
    pub values: Vec<String>,
    /// Instead of `values`: every value from `from` to `to` by `step`.
    #[serde(default)]
    pub range: Option<Range>,
}

/// `from`, `from + step`, … up to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Range {
    pub from: i64,
    pub to: i64,
    pub step: i64,
}

impl Knob {
    /// The values to try: the list, or the range spelled out.
    pub fn candidates(&self) -> Vec<String> {
        match self.range {
            Some(Range { from, to, step }) if step > 0 && from <= to => {
                let count = ((to - from) / step + 1) as usize;
                (0..count.min(MAX_TRIALS as usize + 1))
                    .map(|i| (from + i as i64 * step).to_string())
                    .collect()
            }
            Some(_) => Vec::new(),
            None => self.values.clone(),
        }
    }
}

/// JSON numbers and strings alike become text (`4`, `"q8_0"`, `"3,1"`).
fn values_as_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let raw = Vec::<serde_json::Value>::deserialize(d)?;
    raw.into_iter()
        .map(|v| match v {
            serde_json::Value::String(s) => Ok(s),
            serde_json::Value::Number(n) => Ok(n.to_string()),
            serde_json::Value::Bool(b) => Ok(if b { "on" } else { "off" }.to_owned()),
            other => Err(serde::de::Error::custom(format!(
                "knob value {other} is neither a number nor text"
            ))),
        })
        .collect()
}

/// How the values are searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// One knob at a time from the best so far, upward through its values, stopping at the
    /// first value that is worse beyond the noise, or that fails to run.
    #[default]
    Walk,
    /// Every combination of every knob's values.
    Grid,
}

/// The figure a trial is judged by, from its warm runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// All streams' output tokens per second of wall time.
    #[default]
    AggregateTps,
    /// One stream's decode speed (the median stream of each run).
    StreamTps,
    /// Prompt tokens per second.
    PrefillTps,
    /// Time to first token (lower is better).
    TtftMs,
}

impl Objective {
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Objective::TtftMs)
    }

    pub fn unit(self) -> &'static str {
        match self {
            Objective::TtftMs => "ms",
            _ => "tok/s",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Objective::AggregateTps => "aggregate output tok/s",
            Objective::StreamTps => "per-stream tok/s",
            Objective::PrefillTps => "prefill tok/s",
            Objective::TtftMs => "TTFT",
        }
    }

    /// Each warm run's figure (the cold run is left out when warm ones exist).
    pub fn of_step(self, step: &StepResult) -> Option<Stats> {
        let warm: Vec<_> = step.runs.iter().filter(|r| !r.cold).collect();
        let runs = if warm.is_empty() {
            step.runs.iter().collect()
        } else {
            warm
        };
        Stats::of(runs.iter().filter_map(|r| match self {
            Objective::AggregateTps => r.aggregate_tps,
            Objective::StreamTps => r.stream_tps,
            Objective::PrefillTps => r.prefill_tps,
            Objective::TtftMs => r.ttft_ms,
        }))
    }
}

/// The most trials one tuning run may have.
pub const MAX_TRIALS: u32 = 64;

/// What to tune and how each trial is measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TuneSpec {
    pub knobs: Vec<Knob>,
    pub strategy: Strategy,
    pub objective: Objective,
    /// The benchmark each trial runs: one workload point, a cold run and warm ones.
    pub bench: BenchSpec,
    pub max_trials: u32,
    /// Trials are measured for KL divergence too, and the best must stay under this bound.
    pub quality_floor: Option<QualityFloor>,
}

/// The quality a trial must keep: its mean KL divergence from a recorded reference under a
/// fixed bound, or (no bound given) no worse than the profile as saved by more than the two
/// measurements' uncertainty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityFloor {
    /// A recorded reference's id (`rigdeck quality references` lists them).
    pub reference: String,
    /// The highest mean KLD allowed; none: the base's mean + 2 × the larger uncertainty.
    #[serde(default)]
    pub max_mean_kld: Option<f64>,
}

/// A mean KL divergence with its uncertainty, as llama-perplexity prints them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KldFigure {
    pub mean: f64,
    pub mean_unc: f64,
}

/// A trial's KL divergence against the floor's bound.
#[derive(Debug, Clone, PartialEq)]
pub struct FloorCheck {
    pub bound: f64,
    pub within: bool,
    /// `mean KLD 0.1320 ± 0.0080 > bound 0.0100`, with the base's figures when the bound is theirs.
    pub words: String,
}

impl QualityFloor {
    /// Checks the floor's own fields; the reference itself is checked by the daemon.
    pub fn validate(&self) -> Result<(), String> {
        if self.reference.trim().is_empty() {
            return Err("quality_floor.reference is empty: give a ready reference's id (`rigdeck quality references` lists them)".into());
        }
        match self.max_mean_kld {
            Some(max) if !(max.is_finite() && max > 0.0) => Err(format!(
                "quality_floor.max_mean_kld = {max}: give a mean KLD above 0, e.g. 0.01, or leave it out to stay no worse than the profile as saved"
            )),
            _ => Ok(()),
        }
    }

    /// The trial against the bound; none while a bound relative to the base lacks the base's
    /// figure.
    pub fn check(&self, base: Option<&KldFigure>, trial: &KldFigure) -> Option<FloorCheck> {
        let (bound, why) = match self.max_mean_kld {
            Some(max) => (max, String::new()),
            None => {
                let base = base?;
                let unc = base.mean_unc.max(trial.mean_unc);
                (
                    base.mean + 2.0 * unc,
                    format!(
                        " (the profile as saved: {} + 2 × {})",
                        kld_text(base.mean),
                        kld_text(unc)
                    ),
                )
            }
        };
        let within = trial.mean <= bound;
        Some(FloorCheck {
            bound,
            within,
            words: format!(
                "mean KLD {} ± {} {} bound {}{why}",
                kld_text(trial.mean),
                kld_text(trial.mean_unc),
                if within { "≤" } else { ">" },
                kld_text(bound)
            ),
        })
    }
}

/// Four decimals, or six for the small figures of near-identical numerics (no `-0.000000`
/// for llama.cpp's rounding below zero).
pub fn kld_text(value: f64) -> String {
    let value = if value.abs() < 5e-7 { 0.0 } else { value };
    if value.abs() < 0.001 {
        format!("{value:.6}")
    } else {
        format!("{value:.4}")
    }
}

impl Default for TuneSpec {
    fn default() -> Self {
        TuneSpec {
            knobs: Vec::new(),
            strategy: Strategy::Walk,
            objective: Objective::AggregateTps,
            bench: BenchSpec {
                shapes: vec![crate::Shape {
                    prompt_tokens: 512,
                    output_tokens: 128,
                }],
                warm_runs: 5,
                ..BenchSpec::default()
            },
            max_trials: 24,
            quality_floor: None,
        }
    }
}

impl TuneSpec {
    /// Checks the spec; each message names the field and the fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.knobs.is_empty() {
            return Err(
                "no knob to tune: give at least one, e.g. threads with values 4, 8, 16".into(),
            );
        }
        for knob in &self.knobs {
            if knob.range.is_some() && !knob.values.is_empty() {
                return Err(format!(
                    "knob '{}': give values or a range, not both",
                    knob.name
                ));
            }
            if let Some(r) = knob.range {
                if r.step <= 0 || r.from > r.to {
                    return Err(format!(
                        "knob '{}': the range must go upward (from ≤ to, step ≥ 1), e.g. from 2 to 16 step 2",
                        knob.name
                    ));
                }
            }
            if knob.candidates().is_empty() {
                return Err(format!(
                    "knob '{}' has no value to try: list some, e.g. 128, 256, 512",
                    knob.name
                ));
            }
        }
        let mut names: Vec<&str> = self.knobs.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!(
                "knob '{}' is given twice: list all its values in one knob",
                pair[0]
            ));
        }
        if !(1..=MAX_TRIALS).contains(&self.max_trials) {
            return Err(format!("max_trials must be 1–{MAX_TRIALS}"));
        }
        let needed = self.trials_needed();
        if needed > self.max_trials as usize {
            return Err(format!(
                "this search needs up to {needed} trials (the profile as it is, then each value), more than max_trials {}: \
                 give fewer values, or raise max_trials (at most {MAX_TRIALS})",
                self.max_trials
            ));
        }
        if let Some(floor) = &self.quality_floor {
            floor.validate()?;
        }
        self.bench.validate()?;
        if self.bench.points().len() != 1 {
            return Err("a trial measures one workload point: give one shape, one depth and one concurrency (or one rate)".into());
        }
        if self.bench.warm_runs < 3 {
            return Err("a trial needs at least 3 warm runs to measure the noise a change must beat: set warm_runs to 3 or more".into());
        }
        Ok(())
    }

    /// Trials the search may run at most: the baseline, then each value (walk) or each
    /// combination (grid).
    pub fn trials_needed(&self) -> usize {
        let counts = self.knobs.iter().map(|k| k.candidates().len());
        1 + match self.strategy {
            Strategy::Walk => counts.sum::<usize>(),
            Strategy::Grid => counts.product::<usize>(),
        }
    }
}

/// Knob values of one trial; a knob absent keeps the profile's own setting.
pub type Assignment = BTreeMap<String, String>;

/// How a trial came out, as the search needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialScore {
    /// The objective across the trial's warm runs.
    Measured(Stats),
    /// Measured, but its KL divergence is over the quality floor (the words say by how much).
    BrokeFloor { stats: Stats, reason: String },
    /// It did not run to the end: out of memory, a crash, a failed benchmark.
    Failed,
}

/// A trial against the best so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The first trial: the profile as it is.
    Baseline,
    /// Better than the best so far beyond the noise: the new best.
    Better,
    /// Inside the noise of the best so far: not a win.
    WithinNoise,
    /// Worse than the best so far beyond the noise.
    Worse,
    /// Its KL divergence is over the quality floor: never the best, whatever its speed.
    BrokeFloor,
    /// The trial did not produce a figure.
    Failed,
}

/// The verdict with the figures behind it, in words a user can check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: String,
}

/// Compares a trial with the best so far: a win must beat twice the larger standard deviation
/// of the two trials' warm runs ([`beats_noise`]).
pub fn decide(objective: Objective, candidate: &Stats, best: &Stats) -> Decision {
    let higher = objective.higher_is_better();
    let unit = objective.unit();
    let diff = candidate.median - best.median;
    let noise = 2.0 * candidate.stdev.max(best.stdev);
    let figures = format!(
        "median {:.1} {unit} vs best {:.1} {unit} ({diff:+.1}); noise bound 2 × stdev = {noise:.1} {unit}",
        candidate.median, best.median
    );
    let (verdict, words) = if beats_noise(candidate, best, higher) {
        (Verdict::Better, "beats the best beyond the noise")
    } else if beats_noise(best, candidate, higher) {
        (Verdict::Worse, "worse than the best beyond the noise")
    } else {
        (
            Verdict::WithinNoise,
            "within the noise of the best: not a win",
        )
    };
    Decision {
        verdict,
        reason: format!("{words}: {figures}"),
    }
}

/// Where the search stands: the trials it asked for, the best so far, what to try next.
#[derive(Debug, Clone)]
pub struct Search {
    spec: TuneSpec,
    /// The best trial's values and figure (the baseline until something beats it).
    best: Option<(Assignment, Stats)>,
    /// Walk: the knob being walked and the next value's index. Grid: the next combination.
    cursor: (usize, usize),
    asked: usize,
    baseline_failed: bool,
    /// The best so far is the baseline and it breaks the quality floor: the first trial under
    /// the floor replaces it, whatever its speed.
    best_broke_floor: bool,
}

impl Search {
    pub fn new(spec: TuneSpec) -> Self {
        Search {
            spec,
            best: None,
            cursor: (0, 0),
            asked: 0,
            baseline_failed: false,
            best_broke_floor: false,
        }
    }

    /// The next trial's values, or `None` when the search is over. The first is always the
    /// baseline (no knob changed).
    pub fn next_trial(&mut self) -> Option<Assignment> {
        if self.baseline_failed || self.asked >= self.spec.max_trials as usize {
            return None;
        }
        let next = if self.asked == 0 {
            Some(Assignment::new())
        } else {
            match self.spec.strategy {
                Strategy::Walk => self.next_walk(),
                Strategy::Grid => self.next_grid(),
            }
        };
        if next.is_some() {
            self.asked += 1;
        }
        next
    }

    fn next_walk(&mut self) -> Option<Assignment> {
        let (knob, value) = self.cursor;
        let knob_spec = self.spec.knobs.get(knob)?;
        let candidates = knob_spec.candidates();
        let Some(v) = candidates.get(value) else {
            self.cursor = (knob + 1, 0);
            return self.next_walk();
        };
        let mut assignment = self.best_values();
        assignment.insert(knob_spec.name.clone(), v.clone());
        self.cursor.1 += 1;
        Some(assignment)
    }

    fn next_grid(&mut self) -> Option<Assignment> {
        let lists: Vec<Vec<String>> = self.spec.knobs.iter().map(Knob::candidates).collect();
        let total: usize = lists.iter().map(Vec::len).product();
        let mut index = self.cursor.1;
        if index >= total {
            return None;
        }
        self.cursor.1 += 1;
        let mut assignment = Assignment::new();
        // The last knob varies fastest, like nested loops in the order the knobs were given.
        for (knob, values) in self.spec.knobs.iter().zip(&lists).rev() {
            assignment.insert(knob.name.clone(), values[index % values.len()].clone());
            index /= values.len();
        }
        Some(assignment)
    }

    /// Records how the trial the search last asked for came out, and decides on it.
    pub fn record(&mut self, values: &Assignment, score: &TrialScore) -> Decision {
        let objective = self.spec.objective;
        let (stats, best) = match (score, &self.best) {
            (TrialScore::Failed, _) => {
                if values.is_empty() {
                    self.baseline_failed = true;
                    return Decision {
                        verdict: Verdict::Failed,
                        reason: "the profile as it is did not run: nothing to compare with, so the search stops".into(),
                    };
                }
                self.end_walk_of_knob();
                return Decision {
                    verdict: Verdict::Failed,
                    reason: match self.spec.strategy {
                        Strategy::Walk => "did not run: higher values of this knob are not tried; the search goes on with the next knob".into(),
                        Strategy::Grid => "did not run; the search goes on".into(),
                    },
                };
            }
            (TrialScore::Measured(stats), None) => {
                self.best = Some((values.clone(), *stats));
                return Decision {
                    verdict: Verdict::Baseline,
                    reason: format!(
                        "the profile as it is: {}; later trials must beat it by more than the noise",
                        median_text(objective, stats)
                    ),
                };
            }
            (TrialScore::BrokeFloor { stats, reason }, None) => {
                self.best = Some((values.clone(), *stats));
                self.best_broke_floor = true;
                return Decision {
                    verdict: Verdict::Baseline,
                    reason: format!(
                        "the profile as it is: {}; it breaks the quality floor ({reason}), so the first trial under the floor becomes the best",
                        median_text(objective, stats)
                    ),
                };
            }
            (TrialScore::BrokeFloor { stats, reason }, Some(_)) => {
                self.end_walk_of_knob();
                return Decision {
                    verdict: Verdict::BrokeFloor,
                    reason: format!(
                        "breaks the quality floor: {reason}; its speed ({}) does not count",
                        median_text(objective, stats)
                    ),
                };
            }
            (TrialScore::Measured(stats), Some(_)) if self.best_broke_floor => {
                self.best = Some((values.clone(), *stats));
                self.best_broke_floor = false;
                return Decision {
                    verdict: Verdict::Better,
                    reason: format!(
                        "the first trial under the quality floor (the profile as it is breaks it): {}",
                        median_text(objective, stats)
                    ),
                };
            }
            (TrialScore::Measured(stats), Some((_, best))) => (*stats, *best),
        };
        let decision = decide(objective, &stats, &best);
        match decision.verdict {
            Verdict::Better => self.best = Some((values.clone(), stats)),
            Verdict::Worse => self.end_walk_of_knob(),
            _ => {}
        }
        decision
    }

    /// A walk stops climbing the current knob (the curve got worse or the engine failed).
    fn end_walk_of_knob(&mut self) {
        if self.spec.strategy == Strategy::Walk {
            self.cursor = (self.cursor.0 + 1, 0);
        }
    }

    /// The best trial's values so far (empty: the profile as it is).
    pub fn best_values(&self) -> Assignment {
        self.best
            .as_ref()
            .map(|(v, _)| v.clone())
            .unwrap_or_default()
    }

    /// The best trial's figure so far.
    pub fn best_stats(&self) -> Option<Stats> {
        self.best.as_ref().map(|(_, s)| *s)
    }
}

/// `median 41.2 tok/s (stdev 0.3)`.
fn median_text(objective: Objective, stats: &Stats) -> String {
    format!(
        "median {:.1} {} (stdev {:.1})",
        stats.median,
        objective.unit(),
        stats.stdev
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knob(name: &str, values: &[&str]) -> Knob {
        Knob {
            name: name.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
            range: None,
        }
    }

    /// Three warm runs with this median and (sample) standard deviation.
    fn measured(median: f64, stdev: f64) -> TrialScore {
        TrialScore::Measured(Stats::of([median - stdev, median, median + stdev]).expect("values"))
    }

    fn spec(strategy: Strategy, knobs: Vec<Knob>) -> TuneSpec {
        TuneSpec {
            knobs,
            strategy,
            ..TuneSpec::default()
        }
    }

    #[test]
    fn a_walk_climbs_until_worse_then_moves_to_the_next_knob() {
        let mut search = Search::new(spec(
            Strategy::Walk,
            vec![
                knob("threads", &["2", "4", "8", "16"]),
                knob("ubatch", &["256", "512"]),
            ],
        ));
        let mut trials = Vec::new();
        // The figure each threads value gives; ubatch 512 is inside the noise.
        let score = |a: &Assignment| match (
            a.get("threads").map(String::as_str),
            a.get("ubatch").map(String::as_str),
        ) {
            (None, _) => measured(10.0, 0.2),
            (Some("2"), None) => measured(12.0, 0.2),
            (Some("4"), None) => measured(15.0, 0.2),
            (Some("8"), None) => measured(11.0, 0.2),
            (Some("4"), Some("256")) => TrialScore::Failed,
            _ => measured(15.1, 0.2),
        };
        while let Some(values) = search.next_trial() {
            let decision = search.record(&values, &score(&values));
            trials.push((values, decision.verdict));
        }
        let verdicts: Vec<&Verdict> = trials.iter().map(|(_, v)| v).collect();
        assert_eq!(
            verdicts,
            [
                &Verdict::Baseline,
                &Verdict::Better,
                &Verdict::Better,
                &Verdict::Worse,
                &Verdict::Failed
            ],
            "{trials:?}"
        );
        // threads 16 is never tried (8 was worse); ubatch stops at its first failure.
        assert!(trials
            .iter()
            .all(|(v, _)| v.get("threads").map(String::as_str) != Some("16")));
        assert_eq!(
            search.best_values().get("threads").map(String::as_str),
            Some("4")
        );
        assert_eq!(search.best_values().get("ubatch"), None);
    }

    #[test]
    fn a_gain_inside_the_noise_is_not_a_win() {
        let mut search = Search::new(spec(Strategy::Walk, vec![knob("threads", &["8"])]));
        let base = search.next_trial().expect("baseline");
        search.record(&base, &measured(20.0, 1.0));
        let trial = search.next_trial().expect("threads 8");
        let decision = search.record(&trial, &measured(20.5, 1.0));
        assert_eq!(decision.verdict, Verdict::WithinNoise);
        assert!(
            decision.reason.contains("noise bound"),
            "{}",
            decision.reason
        );
        assert!(search.best_values().is_empty());
        assert!(search.next_trial().is_none());
    }

    #[test]
    fn a_grid_tries_every_combination_and_goes_on_after_a_failure() {
        let mut search = Search::new(spec(
            Strategy::Grid,
            vec![knob("a", &["1", "2"]), knob("b", &["x", "y", "z"])],
        ));
        let mut seen = Vec::new();
        while let Some(values) = search.next_trial() {
            let score = if values.get("b").map(String::as_str) == Some("y") {
                TrialScore::Failed
            } else {
                measured(seen.len() as f64 * 10.0, 0.1)
            };
            search.record(&values, &score);
            seen.push(values);
        }
        assert_eq!(seen.len(), 7);
        assert_eq!(seen[1].get("a").map(String::as_str), Some("1"));
        assert_eq!(seen[2].get("b").map(String::as_str), Some("y"));
        assert_eq!(seen[6].get("a").map(String::as_str), Some("2"));
        assert_eq!(search.best_values(), seen[6]);
    }

    #[test]
    fn a_failed_baseline_ends_the_search() {
        let mut search = Search::new(spec(Strategy::Walk, vec![knob("threads", &["8"])]));
        let base = search.next_trial().expect("baseline");
        let decision = search.record(&base, &TrialScore::Failed);
        assert_eq!(decision.verdict, Verdict::Failed);
        assert!(search.next_trial().is_none());
    }

    #[test]
    fn ttft_is_better_when_lower() {
        let fast = Stats::of([100.0, 101.0, 99.0]).expect("stats");
        let slow = Stats::of([150.0, 151.0, 149.0]).expect("stats");
        assert_eq!(
            decide(Objective::TtftMs, &fast, &slow).verdict,
            Verdict::Better
        );
        assert_eq!(
            decide(Objective::AggregateTps, &fast, &slow).verdict,
            Verdict::Worse
        );
    }

    fn broke(median: f64) -> TrialScore {
        let TrialScore::Measured(stats) = measured(median, 0.2) else {
            unreachable!("measured() measures")
        };
        TrialScore::BrokeFloor {
            stats,
            reason: "mean KLD 0.1320 ± 0.0080 > bound 0.0100".into(),
        }
    }

    fn figure(mean: f64, mean_unc: f64) -> KldFigure {
        KldFigure { mean, mean_unc }
    }

    #[test]
    fn a_fixed_bound_is_checked_with_the_figures_in_words() {
        let floor = QualityFloor {
            reference: "r1".into(),
            max_mean_kld: Some(0.01),
        };
        let over = floor
            .check(None, &figure(0.132, 0.008))
            .expect("a fixed bound");
        assert!(!over.within);
        assert_eq!(over.words, "mean KLD 0.1320 ± 0.0080 > bound 0.0100");
        let under = floor
            .check(None, &figure(0.000_42, 0.000_05))
            .expect("a fixed bound");
        assert!(under.within);
        assert_eq!(under.words, "mean KLD 0.000420 ± 0.000050 ≤ bound 0.0100");
        let identical = floor
            .check(None, &figure(-0.000_000_2, 0.0))
            .expect("fixed");
        assert_eq!(
            identical.words,
            "mean KLD 0.000000 ± 0.000000 ≤ bound 0.0100"
        );
    }

    #[test]
    fn no_bound_means_no_worse_than_the_base_beyond_the_larger_uncertainty() {
        let floor = QualityFloor {
            reference: "r1".into(),
            max_mean_kld: None,
        };
        let base = figure(0.0100, 0.0010);
        assert_eq!(floor.check(None, &figure(0.011, 0.001)), None);
        // 0.0100 + 2 × 0.0015 (the trial's uncertainty is the larger) = 0.0130.
        let close = floor
            .check(Some(&base), &figure(0.0125, 0.0015))
            .expect("judged");
        assert!(close.within, "{}", close.words);
        assert!((close.bound - 0.013).abs() < 1e-12);
        let worse = floor
            .check(Some(&base), &figure(0.0135, 0.0015))
            .expect("judged");
        assert!(!worse.within);
        assert_eq!(
            worse.words,
            "mean KLD 0.0135 ± 0.0015 > bound 0.0130 (the profile as saved: 0.0100 + 2 × 0.0015)"
        );
        // The base against itself is within its own bound.
        assert!(floor.check(Some(&base), &base).expect("judged").within);
    }

    #[test]
    fn a_faster_trial_over_the_floor_is_never_the_best_and_ends_its_knobs_walk() {
        let mut search = Search::new(spec(
            Strategy::Walk,
            vec![
                knob("cache_type", &["f16", "q4_0", "q2_k"]),
                knob("threads", &["4"]),
            ],
        ));
        let mut trials = Vec::new();
        while let Some(values) = search.next_trial() {
            let score = match values.get("cache_type").map(String::as_str) {
                Some("q4_0") | Some("q2_k") => broke(30.0),
                _ if values.contains_key("threads") => measured(12.0, 0.2),
                _ => measured(10.0, 0.2),
            };
            let decision = search.record(&values, &score);
            trials.push((values, decision));
        }
        let verdicts: Vec<&Verdict> = trials.iter().map(|(_, d)| &d.verdict).collect();
        assert_eq!(
            verdicts,
            [
                &Verdict::Baseline,
                &Verdict::WithinNoise,
                &Verdict::BrokeFloor,
                &Verdict::Better
            ],
            "{trials:?}"
        );
        assert!(trials[2].1.reason.contains("> bound 0.0100"));
        assert!(trials[2].1.reason.contains("median 30.0"));
        // q2_k is not tried after q4_0 broke the floor; threads is walked from the best (no KV change).
        assert_eq!(trials[3].0.get("cache_type"), None);
        assert_eq!(
            search.best_values(),
            Assignment::from([("threads".to_owned(), "4".to_owned())])
        );
    }

    #[test]
    fn when_the_profile_as_saved_breaks_the_floor_the_first_trial_under_it_is_the_best() {
        let mut search = Search::new(spec(
            Strategy::Grid,
            vec![knob("cache_type", &["q8_0", "f16"])],
        ));
        let base = search.next_trial().expect("baseline");
        let first = search.record(&base, &broke(20.0));
        assert_eq!(first.verdict, Verdict::Baseline);
        assert!(first.reason.contains("breaks the quality floor"));
        let q8 = search.next_trial().expect("q8_0");
        assert_eq!(
            search.record(&q8, &broke(19.0)).verdict,
            Verdict::BrokeFloor
        );
        let f16 = search.next_trial().expect("f16");
        // Slower than the baseline, but the only trial under the floor.
        let decision = search.record(&f16, &measured(15.0, 0.2));
        assert_eq!(decision.verdict, Verdict::Better, "{}", decision.reason);
        assert_eq!(search.best_values(), f16);
    }

    #[test]
    fn specs_are_checked_with_the_fix_named() {
        let parsed: TuneSpec = serde_json::from_value(serde_json::json!({
            "knobs": [{"name": "threads", "values": [2, 4]}, {"name": "cache_type", "values": ["f16", "q8_0"]},
                      {"name": "ubatch", "range": {"from": 128, "to": 512, "step": 128}}],
            "strategy": "grid"
        }))
        .expect("a spec");
        assert_eq!(parsed.knobs[0].candidates(), ["2", "4"]);
        assert_eq!(parsed.knobs[2].candidates(), ["128", "256", "384", "512"]);
        assert_eq!(parsed.trials_needed(), 1 + 2 * 2 * 4);
        assert!(parsed.validate().is_ok(), "{:?}", parsed.validate());

        let too_many = TuneSpec {
            max_trials: 8,
            ..parsed.clone()
        };
        assert!(too_many
            .validate()
            .expect_err("17 > 8")
            .contains("max_trials"));
        let none = TuneSpec {
            knobs: vec![],
            ..parsed.clone()
        };
        assert!(none
            .validate()
            .expect_err("no knob")
            .contains("at least one"));
        let twice = TuneSpec {
            knobs: vec![knob("t", &["1"]), knob("t", &["2"])],
            ..parsed.clone()
        };
        assert!(twice.validate().expect_err("twice").contains("given twice"));
        let mut noisy = parsed.clone();
        noisy.bench.warm_runs = 1;
        assert!(noisy
            .validate()
            .expect_err("1 warm run")
            .contains("3 warm runs"));
        let mut sweep = parsed;
        sweep.bench.concurrency = vec![1, 2];
        assert!(sweep
            .validate()
            .expect_err("two points")
            .contains("one workload point"));
        let downward = serde_json::from_value::<TuneSpec>(serde_json::json!({
            "knobs": [{"name": "threads", "range": {"from": 8, "to": 2, "step": 1}}]}))
        .expect("parses");
        assert!(downward
            .validate()
            .expect_err("downward")
            .contains("upward"));
        assert!(serde_json::from_value::<TuneSpec>(
            serde_json::json!({"knobs": [{"name": "t", "values": [[1]]}]})
        )
        .is_err());
        let floored = |floor: serde_json::Value| {
            serde_json::from_value::<TuneSpec>(serde_json::json!({
                "knobs": [{"name": "cache_type", "values": ["f16", "q4_0"]}],
                "quality_floor": floor}))
            .expect("parses")
            .validate()
        };
        assert!(floored(serde_json::json!({"reference": "r1"})).is_ok());
        assert!(floored(serde_json::json!({"reference": "r1", "max_mean_kld": 0.01})).is_ok());
        assert!(
            floored(serde_json::json!({"reference": "r1", "max_mean_kld": 0}))
                .expect_err("zero")
                .contains("max_mean_kld")
        );
        assert!(floored(serde_json::json!({"reference": " "}))
            .expect_err("no reference")
            .contains("rigdeck quality references"));
    }
}
