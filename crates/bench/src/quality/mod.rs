//! The quality probe: generated questions with one exact, checkable answer ([`items`]), asked at
//! temperature 0, so a quantization or KV cache type that costs accuracy shows as a lower pass
//! rate next to its speed (000 saw an 8-bit KV cache take a model from 52 % to 24 %). Each reply's
//! last `Answer:` line is graded ([`grading`]); every pass rate carries its 95 % Wilson interval
//! ([`significance`]), and two probes of one seed are compared question by question ([`paired`]).
//! A failed request (a timeout, an HTTP error) is counted apart, never as a wrong answer.

pub mod calendar;
pub mod grading;
pub mod items;
pub mod paired;
pub mod significance;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::endpoint::Endpoint;
use crate::request::{error_text, root_cause, send_request};
use items::Item;
use significance::{wilson, RateInterval};

/// The instruction every question ends with.
const FORMAT: &str = "\n\nThink it through if you need to, then end your reply with one line of the form `Answer: <answer>` and nothing after it.";

/// How a probe runs. `count` and `seed` choose the questions (stored with the run): two probes
/// of one seed are asked the same questions and can be compared question by question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbeSpec {
    /// Room for reasoning before the answer line.
    pub max_tokens: u32,
    /// Questions asked at once.
    pub concurrency: u32,
    pub request_timeout_s: u64,
    /// Questions generated, in turn from each category.
    pub count: u32,
    /// The generators' seed.
    pub seed: u64,
}

/// The largest seed a browser's numbers hold exactly (2^53 − 1).
const MAX_SEED: u64 = (1 << 53) - 1;

impl Default for ProbeSpec {
    fn default() -> Self {
        ProbeSpec {
            max_tokens: 2048,
            concurrency: 4,
            request_timeout_s: 600,
            count: 250,
            seed: 1,
        }
    }
}

impl ProbeSpec {
    pub fn validate(&self) -> Result<(), String> {
        if !(16..=65_536).contains(&self.max_tokens) {
            return Err(format!("quality probe max_tokens {}: use 16 to 65536 (reasoning models need a few thousand)", self.max_tokens));
        }
        if !(1..=64).contains(&self.concurrency) {
            return Err(format!(
                "quality probe concurrency {}: use 1 to 64",
                self.concurrency
            ));
        }
        if !(5..=5000).contains(&self.count) {
            return Err(format!(
                "quality probe count {}: use 5 to 5000 questions (250, 50 per category, tells apart rates about 10 points apart)",
                self.count
            ));
        }
        if self.seed > MAX_SEED {
            return Err(format!(
                "quality probe seed {}: use 0 to {MAX_SEED}",
                self.seed
            ));
        }
        Ok(())
    }

    /// Questions in the probe.
    pub fn total(&self) -> u32 {
        self.count
    }
}

/// One question's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub id: String,
    pub category: String,
    /// The question as asked (without the answer-format instruction).
    #[serde(default)]
    pub question: String,
    pub expected: String,
    /// What the reply's answer line said.
    pub got: Option<String>,
    pub pass: bool,
    /// The reply's end (where the answer is), for reading why it failed.
    pub reply_tail: String,
    pub output_tokens: Option<u64>,
    /// The reply was cut at `max_tokens` before it answered.
    pub truncated: bool,
    /// The request failed (a timeout, an HTTP error): no answer to grade.
    pub error: Option<String>,
    pub duration_ms: f64,
}

impl Answer {
    /// What the reply answered, as tables show it: the answer, the error, or why there is none.
    pub fn shown(&self) -> String {
        match (&self.error, &self.got) {
            (Some(error), _) => format!("error: {error}"),
            (None, Some(got)) => got.clone(),
            (None, None) if self.truncated => "(cut at max_tokens)".to_owned(),
            (None, None) => "(no answer)".to_owned(),
        }
    }

    /// A reply came back to grade.
    pub fn graded(&self) -> bool {
        self.error.is_none()
    }
}

/// Pass counts, overall and per category, of the graded answers (failed requests apart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSummary {
    /// Questions in the probe.
    pub total: u32,
    /// Questions done: graded or failed.
    pub answered: u32,
    /// Answers with a reply to grade.
    #[serde(default)]
    pub graded: u32,
    pub passed: u32,
    /// passed / graded.
    pub pass_rate: Option<f64>,
    /// Its 95 % Wilson interval.
    #[serde(default)]
    pub interval: Option<RateInterval>,
    /// Failed requests: not graded, not counted as wrong.
    pub errors: u32,
    /// (passed, graded) per category.
    pub by_category: BTreeMap<String, (u32, u32)>,
    #[serde(default)]
    pub category_intervals: BTreeMap<String, RateInterval>,
    /// Failed requests per category (categories with none left out).
    #[serde(default)]
    pub category_errors: BTreeMap<String, u32>,
}

impl ProbeSummary {
    pub fn of(spec: &ProbeSpec, answers: &[Answer]) -> Self {
        let mut by_category: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        let mut category_errors: BTreeMap<String, u32> = BTreeMap::new();
        for a in answers {
            if !a.graded() {
                *category_errors.entry(a.category.clone()).or_default() += 1;
                by_category.entry(a.category.clone()).or_default();
                continue;
            }
            let entry = by_category.entry(a.category.clone()).or_default();
            entry.1 += 1;
            entry.0 += u32::from(a.pass);
        }
        let graded = answers.iter().filter(|a| a.graded()).count() as u32;
        let passed = answers.iter().filter(|a| a.graded() && a.pass).count() as u32;
        let category_intervals = by_category
            .iter()
            .filter_map(|(c, (p, n))| wilson(*p, *n).map(|i| (c.clone(), i)))
            .collect();
        ProbeSummary {
            total: spec.total(),
            answered: answers.len() as u32,
            graded,
            passed,
            pass_rate: (graded > 0).then(|| f64::from(passed) / f64::from(graded)),
            interval: wilson(passed, graded),
            errors: answers.len() as u32 - graded,
            by_category,
            category_intervals,
            category_errors,
        }
    }
}

impl ProbeSummary {
    /// "passed 5 of 8: 62 % (95 % interval 31–86 %); 2 failed requests not counted".
    pub fn headline(&self) -> String {
        let mut text = format!(
            "passed {} of {}: {}",
            self.passed,
            self.graded,
            rate_text(self.pass_rate, self.interval)
        );
        if self.errors > 0 {
            text += &format!(
                "; {} failed request{} not counted",
                self.errors,
                if self.errors == 1 { "" } else { "s" }
            );
        }
        text
    }
}

/// A pass rate with its interval: "62 % (95 % interval 31–86 %)", or "–" without one.
pub fn rate_text(rate: Option<f64>, interval: Option<RateInterval>) -> String {
    let percent = |x: f64| format!("{:.0}", x * 100.0);
    match (rate, interval) {
        (Some(rate), Some(i)) => format!(
            "{} % (95 % interval {}–{} %)",
            percent(rate),
            percent(i.low),
            percent(i.high)
        ),
        (Some(rate), None) => format!("{} %", percent(rate)),
        _ => "–".to_owned(),
    }
}

/// Where a probe's answers go as they come (the daemon stores them and tells the UI). The probe
/// waits for each report to be taken, so a sink that falls behind holds the next question back.
pub trait AnswerSink: Send + Sync {
    /// The answers so far, in question order.
    fn answers(&self, answers: &[Answer]) -> impl std::future::Future<Output = ()> + Send;
}

/// Asks every question; `progress` gets the answers so far after each. Ends early (with what
/// was answered) when `cancel` turns true. Returns the answers in question order.
pub async fn probe(
    endpoint: &Endpoint,
    spec: &ProbeSpec,
    progress: &impl AnswerSink,
    mut cancel: watch::Receiver<bool>,
) -> (Vec<Answer>, bool) {
    let client = reqwest::Client::new();
    let url = endpoint.route(crate::spec::Api::Chat);
    let timeout = Duration::from_secs(spec.request_timeout_s);
    let questions = items::items(spec.seed, spec.count);
    let mut answers: Vec<Answer> = Vec::new();
    let mut asked: Vec<usize> = Vec::new();
    let mut tasks = JoinSet::new();
    let mut next = 0;
    let mut cancelled = false;
    loop {
        while next < questions.len() && tasks.len() < spec.concurrency as usize {
            let body = json!({
                "model": endpoint.model,
                "messages": [{"role": "user", "content": format!("{}{FORMAT}", questions[next].prompt)}],
                "temperature": 0,
                "max_tokens": spec.max_tokens,
                "stream": false,
            });
            let (client, url, key) = (client.clone(), url.clone(), endpoint.api_key.clone());
            let index = next;
            tasks.spawn(async move {
                (
                    index,
                    ask(&client, &url, key.as_deref(), &body, timeout).await,
                )
            });
            next += 1;
        }
        let joined = tokio::select! {
            joined = tasks.join_next() => joined,
            Ok(_) = cancel.wait_for(|c| *c) => { cancelled = true; None }
        };
        let Some(joined) = joined else { break };
        let Ok((index, reply)) = joined else { continue };
        // Kept in question order: `asked` holds each answer's question index.
        let at = asked.partition_point(|i| *i < index);
        asked.insert(at, index);
        answers.insert(at, grade(&questions[index], reply));
        progress.answers(&answers).await;
    }
    (answers, cancelled)
}

/// A reply as far as grading needs it.
struct Reply {
    content: String,
    output_tokens: Option<u64>,
    truncated: bool,
    error: Option<String>,
    duration_ms: f64,
}

async fn ask(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: &Value,
    timeout: Duration,
) -> Reply {
    let start = Instant::now();
    let mut request = client.post(url).json(body).timeout(timeout);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let outcome: Result<Value, String> = async {
        let response = send_request(request)
            .await
            .map_err(|e| format!("cannot reach {url}: {}", root_cause(&e)))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| root_cause(&e))?;
        if !status.is_success() {
            return Err(format!("{url} answered {status}: {}", error_text(&text)));
        }
        serde_json::from_str(&text).map_err(|e| format!("the answer is not JSON: {e}"))
    }
    .await;
    let duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    match outcome {
        Ok(value) => Reply {
            content: value
                .pointer("/choices/0/message/content")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            output_tokens: value
                .pointer("/usage/completion_tokens")
                .and_then(Value::as_u64),
            truncated: value
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                == Some("length"),
            error: None,
            duration_ms,
        },
        Err(error) => Reply {
            content: String::new(),
            output_tokens: None,
            truncated: false,
            error: Some(error),
            duration_ms,
        },
    }
}

fn grade(item: &Item, reply: Reply) -> Answer {
    let visible = grading::without_thinking(&reply.content);
    let got = grading::answer_line(visible);
    let pass = reply.error.is_none()
        && got
            .as_deref()
            .is_some_and(|g| grading::matches(&item.check, &item.answer, g));
    let tail_start = visible.char_indices().rev().nth(299).map_or(0, |(i, _)| i);
    Answer {
        id: item.id.clone(),
        category: item.category.to_owned(),
        question: item.prompt.clone(),
        expected: item.answer.clone(),
        got,
        pass,
        reply_tail: visible[tail_start..].to_owned(),
        output_tokens: reply.output_tokens,
        truncated: reply.truncated,
        error: reply.error,
        duration_ms: reply.duration_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> Reply {
        Reply {
            content: text.to_owned(),
            output_tokens: Some(10),
            truncated: false,
            error: None,
            duration_ms: 1.0,
        }
    }

    fn failed_request() -> Reply {
        Reply {
            error: Some("http://x/v1/chat/completions answered 503".to_owned()),
            ..reply("")
        }
    }

    #[test]
    fn a_reply_with_the_generated_answer_passes_and_a_failed_request_is_no_answer() {
        for item in items::items(3, 20) {
            let right = grade(
                &item,
                reply(&format!("Let me see.\nAnswer: {}", item.answer)),
            );
            assert!(right.pass, "{}: {}", item.id, item.answer);
            assert_eq!(right.question, item.prompt);
            let wrong = grade(&item, reply("Answer: 1999-01-01 zebra 0.5"));
            assert!(!wrong.pass, "{}", item.id);
            let failed = grade(&item, failed_request());
            assert!(!failed.pass && failed.error.is_some());
        }
    }

    /// Errors are counted apart: the pass rate and its interval are of the graded answers.
    #[test]
    fn summaries_count_failed_requests_apart_from_wrong_answers() {
        let items = items::items(5, 10);
        let answers: Vec<Answer> = items
            .iter()
            .enumerate()
            .map(|(i, item)| match i {
                0..=4 => grade(item, reply(&format!("Answer: {}", item.answer))),
                5 | 6 => grade(item, failed_request()),
                _ => grade(item, reply("Answer: none")),
            })
            .collect();
        let spec = ProbeSpec {
            count: 10,
            ..ProbeSpec::default()
        };
        let summary = ProbeSummary::of(&spec, &answers);
        assert_eq!(
            (
                summary.total,
                summary.answered,
                summary.graded,
                summary.passed,
                summary.errors
            ),
            (10, 10, 8, 5, 2)
        );
        assert_eq!(summary.pass_rate, Some(5.0 / 8.0));
        assert_eq!(summary.interval, significance::wilson(5, 8));
        // arithmetic: items 0 and 5 (5 failed); units: 1 and 6 (6 failed); dates: 2 and 7.
        assert_eq!(summary.by_category.get("arithmetic"), Some(&(1, 1)));
        assert_eq!(summary.by_category.get("dates"), Some(&(1, 2)));
        assert_eq!(
            summary.category_intervals.get("dates"),
            significance::wilson(1, 2).as_ref()
        );
        assert_eq!(summary.category_errors.get("units"), Some(&1));
        assert_eq!(
            summary.headline(),
            "passed 5 of 8: 62 % (95 % interval 31–86 %); 2 failed requests not counted"
        );
    }

    #[test]
    fn count_and_seed_are_checked_with_a_message_naming_the_fix() {
        let bad = |spec: ProbeSpec| spec.validate().expect_err("refused");
        assert!(bad(ProbeSpec {
            count: 0,
            ..ProbeSpec::default()
        })
        .contains("count 0: use 5 to 5000"));
        assert!(bad(ProbeSpec {
            seed: u64::MAX,
            ..ProbeSpec::default()
        })
        .contains("seed"));
        assert!(ProbeSpec::default().validate().is_ok());
        assert_eq!(ProbeSpec::default().total(), 250);
    }
}
