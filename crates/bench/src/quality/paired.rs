//! Two probes compared on the questions both were asked and both got a reply to (the same id,
//! question and expected answer): each one's pass rate there with its 95 % interval, the
//! questions only one of them passed, and McNemar's exact test of whether that split tells them
//! apart. Failed requests are left out on both sides, never counted as wrong.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::significance::{mcnemar_exact, wilson, RateInterval, ALPHA};
use super::{Answer, ProbeSpec};
use crate::store::{RunDetail, RunSpec};

/// One probe's side of a comparison, on the shared questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedSide {
    pub passed: u32,
    pub pass_rate: Option<f64>,
    pub interval: Option<RateInterval>,
}

/// Which probe did better, when the test can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    BaseBetter,
    OtherBetter,
    NotDistinguishable,
}

/// A probe against a base probe, question by question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeComparison {
    /// Questions both were asked and both got a reply to.
    pub shared: u32,
    pub base: PairedSide,
    pub other: PairedSide,
    pub both_passed: u32,
    /// Passed by the base only.
    pub base_only: u32,
    /// Passed by the other only.
    pub other_only: u32,
    pub neither: u32,
    /// The exact McNemar p-value of the split between `base_only` and `other_only`.
    pub p_value: f64,
    pub verdict: Verdict,
    /// Questions one of them was not asked, or whose request failed on either side.
    pub left_out: u32,
}

impl ProbeComparison {
    /// `base` and `other` on the questions they share.
    pub fn of(base: &[Answer], other: &[Answer]) -> Self {
        let by_id: HashMap<&str, &Answer> = other.iter().map(|a| (a.id.as_str(), a)).collect();
        let pairs: Vec<(bool, bool)> = base
            .iter()
            .filter_map(|a| by_id.get(a.id.as_str()).map(|b| (a, *b)))
            .filter(|(a, b)| same_question(a, b) && a.error.is_none() && b.error.is_none())
            .map(|(a, b)| (a.pass, b.pass))
            .collect();
        let count = |want: (bool, bool)| pairs.iter().filter(|p| **p == want).count() as u32;
        let (both_passed, base_only) = (count((true, true)), count((true, false)));
        let (other_only, neither) = (count((false, true)), count((false, false)));
        let shared = pairs.len() as u32;
        let p_value = mcnemar_exact(base_only, other_only);
        let verdict = if p_value >= ALPHA {
            Verdict::NotDistinguishable
        } else if base_only > other_only {
            Verdict::BaseBetter
        } else {
            Verdict::OtherBetter
        };
        let asked: std::collections::HashSet<&str> =
            base.iter().chain(other).map(|a| a.id.as_str()).collect();
        ProbeComparison {
            shared,
            base: side(both_passed + base_only, shared),
            other: side(both_passed + other_only, shared),
            both_passed,
            base_only,
            other_only,
            neither,
            p_value,
            verdict,
            left_out: asked.len() as u32 - shared,
        }
    }

    /// "A better (p = 0.003)", "B better (p = 0.04)" or "not distinguishable (p = 0.42)".
    pub fn sentence(&self, base: &str, other: &str) -> String {
        let p = format_p(self.p_value);
        match self.verdict {
            Verdict::BaseBetter => format!("{base} better ({p})"),
            Verdict::OtherBetter => format!("{other} better ({p})"),
            Verdict::NotDistinguishable => format!("not distinguishable ({p})"),
        }
    }
}

/// Two stored runs compared, when both are probes of one seed; else why they cannot be.
pub fn compare_runs(base: &RunDetail, other: &RunDetail) -> Result<ProbeComparison, String> {
    let (base_spec, other_spec) = (probe_spec(base)?, probe_spec(other)?);
    if base_spec.seed != other_spec.seed {
        return Err(format!(
            "probes {} (seed {}) and {} (seed {}) asked different questions: compare probes run with the same seed",
            base.summary.id, base_spec.seed, other.summary.id, other_spec.seed
        ));
    }
    Ok(ProbeComparison::of(&base.answers, &other.answers))
}

fn probe_spec(run: &RunDetail) -> Result<&ProbeSpec, String> {
    match &run.summary.spec {
        RunSpec::Quality(spec) => Ok(spec),
        _ => Err(format!(
            "run {} is a {} run, not a quality probe: compare two quality probes",
            run.summary.id, run.summary.kind
        )),
    }
}

/// "p = 0.042", "p < 0.001".
pub fn format_p(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".to_owned()
    } else {
        format!(
            "p = {}",
            format!("{p:.3}")
                .trim_end_matches('0')
                .trim_end_matches('.')
        )
    }
}

/// The same question in both: a probe of another seed may reuse an id for another question.
fn same_question(a: &Answer, b: &Answer) -> bool {
    a.expected == b.expected && a.question == b.question
}

fn side(passed: u32, shared: u32) -> PairedSide {
    PairedSide {
        passed,
        pass_rate: (shared > 0).then(|| f64::from(passed) / f64::from(shared)),
        interval: wilson(passed, shared),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: &str, pass: bool) -> Answer {
        Answer {
            id: id.to_owned(),
            category: "arithmetic".to_owned(),
            question: format!("question {id}"),
            expected: "1".to_owned(),
            got: Some(if pass { "1" } else { "2" }.to_owned()),
            pass,
            reply_tail: String::new(),
            output_tokens: Some(1),
            truncated: false,
            error: None,
            duration_ms: 1.0,
        }
    }

    fn failed(id: &str) -> Answer {
        Answer {
            error: Some("timed out".to_owned()),
            got: None,
            pass: false,
            ..answer(id, false)
        }
    }

    /// `a` and `b` answers from pass patterns: (base passed, other passed) per question.
    fn probes(pattern: &[(bool, bool)]) -> (Vec<Answer>, Vec<Answer>) {
        pattern
            .iter()
            .enumerate()
            .map(|(i, (a, b))| (answer(&format!("q-{i}"), *a), answer(&format!("q-{i}"), *b)))
            .unzip()
    }

    #[test]
    fn a_clear_split_names_the_better_probe() {
        let mut pattern = vec![(true, false); 9];
        pattern.push((false, true));
        pattern.extend([(true, true); 20]);
        pattern.extend([(false, false); 5]);
        let (a, b) = probes(&pattern);
        let c = ProbeComparison::of(&a, &b);
        assert_eq!(
            (
                c.shared,
                c.both_passed,
                c.base_only,
                c.other_only,
                c.neither
            ),
            (35, 20, 9, 1, 5)
        );
        assert!((c.p_value - 22.0 / 1024.0).abs() < 1e-12);
        assert_eq!(c.verdict, Verdict::BaseBetter);
        assert_eq!(c.sentence("f16", "q4_0"), "f16 better (p = 0.021)");
        assert_eq!(c.base.passed, 29);
        assert_eq!(c.other.passed, 21);
        let reversed = ProbeComparison::of(&b, &a);
        assert_eq!(reversed.verdict, Verdict::OtherBetter);
    }

    #[test]
    fn an_even_split_is_not_distinguishable_however_far_the_rates_look_apart() {
        // 4 to 1 looks like a gap of 3 questions, but five discordant questions cannot show it.
        let mut pattern = vec![(true, false); 4];
        pattern.push((false, true));
        pattern.extend([(true, true); 10]);
        let (a, b) = probes(&pattern);
        let c = ProbeComparison::of(&a, &b);
        assert_eq!(c.verdict, Verdict::NotDistinguishable);
        assert_eq!(c.sentence("A", "B"), "not distinguishable (p = 0.375)");
        let same = ProbeComparison::of(&a, &a);
        assert_eq!(
            (same.p_value, same.verdict),
            (1.0, Verdict::NotDistinguishable)
        );
    }

    #[test]
    fn failed_requests_and_other_questions_are_left_out_not_counted_wrong() {
        let (mut a, mut b) = probes(&[(true, true), (true, false), (false, false)]);
        a.push(failed("q-3"));
        b.push(answer("q-3", true));
        b[0] = failed("q-0");
        // Same id, another question (another seed): not paired.
        a.push(answer("q-4", true));
        b.push(Answer {
            question: "another".to_owned(),
            ..answer("q-4", false)
        });
        b.push(answer("q-5", true));
        let c = ProbeComparison::of(&a, &b);
        assert_eq!(
            (c.shared, c.base_only, c.other_only, c.neither),
            (2, 1, 0, 1)
        );
        assert_eq!(c.left_out, 4);
        assert_eq!(c.base.interval, wilson(1, 2));
    }

    fn run(id: i64, kind: &str, spec: serde_json::Value, answers: &[Answer]) -> RunDetail {
        serde_json::from_value(serde_json::json!({
            "id": id, "name": "probe", "kind": kind, "target": null, "spec": spec,
            "status": "done", "error": null, "exact_prompts": false, "started_at_ms": 0,
            "finished_at_ms": 1, "steps": [], "quality": null, "runs_done": 0, "runs_total": 0,
            "context": null, "telemetry": [], "results": [], "answers": answers, "tests": []
        }))
        .expect("a run")
    }

    #[test]
    fn only_probes_of_one_seed_are_compared() {
        let (a, b) = probes(&[(true, false), (true, true)]);
        let probe = |id, seed| {
            let spec = serde_json::to_value(ProbeSpec {
                seed,
                ..ProbeSpec::default()
            });
            run(
                id,
                "quality",
                spec.expect("json"),
                if id == 1 { &a } else { &b },
            )
        };
        let compared = compare_runs(&probe(1, 7), &probe(2, 7)).expect("comparable");
        assert_eq!((compared.shared, compared.base_only), (2, 1));
        let seeds = compare_runs(&probe(1, 7), &probe(2, 8)).expect_err("other seeds");
        assert!(
            seeds.contains("probes 1 (seed 7) and 2 (seed 8) asked different questions"),
            "{seeds}"
        );
        let speed = run(3, "serving", serde_json::json!({"shapes": []}), &[]);
        let kind = compare_runs(&probe(1, 7), &speed).expect_err("a speed run");
        assert!(
            kind.contains("run 3 is a serving run, not a quality probe"),
            "{kind}"
        );
    }

    #[test]
    fn p_values_read_plainly() {
        assert_eq!(format_p(0.0004), "p < 0.001");
        assert_eq!(format_p(0.0213), "p = 0.021");
        assert_eq!(format_p(1.0), "p = 1");
        assert_eq!(format_p(0.5), "p = 0.5");
    }
}
