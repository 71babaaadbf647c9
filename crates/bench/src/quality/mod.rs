//! The quality probe: questions with one exact, checkable answer, asked at temperature 0, so a
//! quantization or KV cache type that costs accuracy shows as a lower pass rate next to its speed
//! (000 saw an 8-bit KV cache take a model from 52 % to 24 %). Each reply's last `Answer:` line is
//! compared with the expected answer (numbers numerically, text case- and punctuation-blind).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::endpoint::Endpoint;
use crate::request::{error_text, root_cause, send_request};

/// How an answer is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Equal as numbers (within 1e-6 relative).
    Number,
    /// Equal as words, ignoring case, punctuation and surrounding markup.
    Text,
}

struct Question {
    id: &'static str,
    category: &'static str,
    prompt: &'static str,
    answer: &'static str,
    check: Check,
}

const fn q(
    id: &'static str,
    category: &'static str,
    prompt: &'static str,
    answer: &'static str,
    check: Check,
) -> Question {
    Question {
        id,
        category,
        prompt,
        answer,
        check,
    }
}

use Check::{Number, Text};

/// The built-in set: arithmetic, reasoning, text handling, code reading, facts.
const QUESTIONS: &[Question] = &[
    q("arith-1", "arithmetic", "What is 347 × 29?", "10063", Number),
    q("arith-2", "arithmetic", "What is 15 % of 2 480?", "372", Number),
    q("arith-3", "arithmetic", "What is (1 024 − 376) ÷ 8?", "81", Number),
    q("arith-4", "arithmetic", "What is the sum of the integers from 1 to 60?", "1830", Number),
    q("arith-5", "arithmetic", "What is 2 to the power 17?", "131072", Number),
    q("arith-6", "arithmetic", "A price of 84 euros rises by 25 % and then falls by 20 %. What is the final price in euros?", "84", Number),
    q("word-1", "reasoning", "A train leaves at 13:40 and the trip takes 2 hours 35 minutes. At what time does it arrive? Give the time as HH:MM in 24-hour form.", "16:15", Text),
    q("word-2", "reasoning", "Anna is 3 years older than Ben. In 5 years their ages will add up to 41. How old is Anna now?", "17", Number),
    q("word-3", "reasoning", "A tank holds 600 litres. One pipe fills it in 30 minutes, another empties it in 50 minutes. Starting empty with both open, how many minutes until it is full?", "75", Number),
    q("word-4", "reasoning", "There are 5 red, 7 blue and 8 green marbles in a bag. How many must you take without looking to be sure of having two of the same colour?", "4", Number),
    q("word-5", "reasoning", "If all bloops are razzies and no razzies are lazzies, can a bloop be a lazzie? Answer yes or no.", "no", Text),
    q("word-6", "reasoning", "A week from the day after tomorrow is a Sunday. What day is today?", "Friday", Text),
    q("word-7", "reasoning", "How many times does the digit 7 appear when writing every integer from 1 to 100?", "20", Number),
    q("word-8", "reasoning", "A snail climbs 3 metres up a 10-metre wall each day and slides back 2 metres each night. On which day does it reach the top?", "8", Number),
    q("text-1", "text", "Write the word 'benchmark' backwards.", "kramhcneb", Text),
    q("text-2", "text", "How many letters 'r' are in the word 'strawberry'?", "3", Number),
    q("text-3", "text", "Sort these words alphabetically and give the third one: pear, apple, mango, cherry, banana.", "cherry", Text),
    q("text-4", "text", "What is the last word of this sentence: 'Quiet rivers carry the heaviest stones downstream'?", "downstream", Text),
    q("text-5", "text", "Which word does not belong: copper, iron, granite, silver, zinc?", "granite", Text),
    q("code-1", "code", "What does this Python print?\n\nx = [3, 1, 4, 1, 5, 9, 2]\nprint(sorted(x)[len(x) // 2])", "3", Number),
    q("code-2", "code", "What does this Python print?\n\ns = 0\nfor i in range(1, 6):\n    if i % 2 == 0:\n        continue\n    s += i * i\nprint(s)", "35", Number),
    q("code-3", "code", "What does this Python print?\n\nprint(len('local inference'.split('e')))", "4", Number),
    q("code-4", "code", "What does this Rust expression evaluate to: (1..=4).map(|x| x * x).sum::<i32>()?", "30", Number),
    q("code-5", "code", "In JSON, what is the value of .b[1].c in {\"a\": 1, \"b\": [{\"c\": 2}, {\"c\": 5}]}?", "5", Number),
    q("fact-1", "facts", "What is the chemical symbol of tungsten?", "W", Text),
    q("fact-2", "facts", "What is the capital of Australia?", "Canberra", Text),
    q("fact-3", "facts", "How many bits are in a byte?", "8", Number),
    q("fact-4", "facts", "What is the boiling point of water at sea level in degrees Fahrenheit?", "212", Number),
    q("fact-5", "facts", "Which planet is closest to the Sun?", "Mercury", Text),
    q("fact-6", "facts", "How many sides does a dodecagon have?", "12", Number),
];

/// The instruction every question ends with.
const FORMAT: &str = "\n\nThink it through if you need to, then end your reply with one line of the form `Answer: <answer>` and nothing after it.";

/// How a probe runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbeSpec {
    /// Room for reasoning before the answer line.
    pub max_tokens: u32,
    /// Questions asked at once.
    pub concurrency: u32,
    pub request_timeout_s: u64,
}

impl Default for ProbeSpec {
    fn default() -> Self {
        ProbeSpec {
            max_tokens: 2048,
            concurrency: 4,
            request_timeout_s: 600,
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
        Ok(())
    }

    /// Questions in the probe.
    pub fn total(&self) -> u32 {
        QUESTIONS.len() as u32
    }
}

/// One question's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub id: String,
    pub category: String,
    pub expected: String,
    /// What the reply's answer line said.
    pub got: Option<String>,
    pub pass: bool,
    /// The reply's end (where the answer is), for reading why it failed.
    pub reply_tail: String,
    pub output_tokens: Option<u64>,
    /// The reply was cut at `max_tokens` before it answered.
    pub truncated: bool,
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
}

/// Pass counts, overall and per category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSummary {
    pub total: u32,
    pub answered: u32,
    pub passed: u32,
    pub pass_rate: Option<f64>,
    pub errors: u32,
    pub by_category: BTreeMap<String, (u32, u32)>,
}

impl ProbeSummary {
    pub fn of(answers: &[Answer]) -> Self {
        let mut by_category: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for a in answers {
            let entry = by_category.entry(a.category.clone()).or_default();
            entry.1 += 1;
            entry.0 += u32::from(a.pass);
        }
        let passed = answers.iter().filter(|a| a.pass).count() as u32;
        ProbeSummary {
            total: QUESTIONS.len() as u32,
            answered: answers.len() as u32,
            passed,
            pass_rate: (!answers.is_empty()).then(|| f64::from(passed) / answers.len() as f64),
            errors: answers.iter().filter(|a| a.error.is_some()).count() as u32,
            by_category,
        }
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
    let mut answers: Vec<Answer> = Vec::new();
    let mut tasks = JoinSet::new();
    let mut next = 0;
    let mut cancelled = false;
    loop {
        while next < QUESTIONS.len() && tasks.len() < spec.concurrency as usize {
            let body = json!({
                "model": endpoint.model,
                "messages": [{"role": "user", "content": format!("{}{FORMAT}", QUESTIONS[next].prompt)}],
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
        answers.push(grade(&QUESTIONS[index], reply));
        answers.sort_by_key(|a| QUESTIONS.iter().position(|q| q.id == a.id));
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

fn grade(question: &Question, reply: Reply) -> Answer {
    let visible = without_thinking(&reply.content);
    let got = answer_line(visible);
    let pass = got.as_deref().is_some_and(|g| matches(question, g));
    let tail_start = visible.char_indices().rev().nth(299).map_or(0, |(i, _)| i);
    Answer {
        id: question.id.to_owned(),
        category: question.category.to_owned(),
        expected: question.answer.to_owned(),
        got,
        pass,
        reply_tail: visible[tail_start..].to_owned(),
        output_tokens: reply.output_tokens,
        truncated: reply.truncated,
        error: reply.error,
        duration_ms: reply.duration_ms,
    }
}

/// The text after a reasoning block the template left in the content.
fn without_thinking(text: &str) -> &str {
    match text.rfind("</think>") {
        Some(end) => &text[end + "</think>".len()..],
        None => text,
    }
}

/// The last `Answer:` line's value (markup stripped), else the last non-empty line.
fn answer_line(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let marked = lines.iter().rev().find_map(|line| {
        let plain = line.replace(['*', '`', '#'], "");
        let lower = plain.to_lowercase();
        lower
            .rfind("answer:")
            .map(|at| plain[at + "answer:".len()..].trim().to_owned())
    });
    marked
        .or_else(|| lines.last().map(|l| l.to_string()))
        .filter(|a| !a.is_empty())
}

fn matches(question: &Question, got: &str) -> bool {
    match question.check {
        Number => {
            let expected: f64 = question.answer.parse().unwrap_or(f64::NAN);
            first_number(got)
                .is_some_and(|n| (n - expected).abs() <= 1e-6 * expected.abs().max(1.0))
        }
        Text => normalize(got) == normalize(question.answer),
    }
}

/// The first number in `text` (thousands separators allowed).
fn first_number(text: &str) -> Option<f64> {
    let cleaned: String = text
        .chars()
        .filter(|c| !matches!(c, ',' | ' ' | '\u{202f}' | '\u{a0}'))
        .collect();
    let start = cleaned.find(|c: char| c.is_ascii_digit() || c == '-')?;
    let number: String = cleaned[start..]
        .chars()
        .enumerate()
        .take_while(|(i, c)| c.is_ascii_digit() || *c == '.' || (*i == 0 && *c == '-'))
        .map(|(_, c)| c)
        .collect();
    number.trim_end_matches('.').parse().ok()
}

/// Lower case, without surrounding punctuation or a leading "the": a hedge ("yes, or no") stays
/// different from either answer.
fn normalize(text: &str) -> String {
    let lower = text
        .trim()
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    lower
        .strip_prefix("the ")
        .map_or(lower.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(id: &str) -> &'static Question {
        QUESTIONS.iter().find(|q| q.id == id).expect("a question")
    }

    fn reply(text: &str) -> Reply {
        Reply {
            content: text.to_owned(),
            output_tokens: Some(10),
            truncated: false,
            error: None,
            duration_ms: 1.0,
        }
    }

    #[test]
    fn answers_are_read_from_the_last_answer_line_and_compared_fairly() {
        let pass = |id: &str, text: &str| grade(question(id), reply(text)).pass;
        assert!(pass("arith-1", "347 × 29 = 10,063.\nAnswer: 10,063"));
        assert!(pass("arith-1", "**Answer:** 10063"));
        assert!(!pass("arith-1", "Answer: 10036"));
        assert!(pass("word-1", "Answer: 16:15"));
        assert!(pass(
            "fact-2",
            "<think>Sydney? No.</think>The capital is Canberra.\nAnswer: Canberra."
        ));
        assert!(!pass(
            "fact-2",
            "<think>Answer: Canberra</think>Answer: Sydney"
        ));
        assert!(pass("word-6", "Answer: friday"));
        assert!(!pass("word-5", "Answer: yes, or no"));
        assert!(pass("text-1", "Answer: `kramhcneb`"));
        assert!(pass("fact-3", "8"));
    }

    /// Counts the days instead of trusting the key: today + 2 (the day after tomorrow) + 7 (a
    /// week from it) is a Sunday.
    #[test]
    fn the_weekday_question_key_is_the_day_nine_days_before_a_sunday() {
        const WEEK: [&str; 7] = [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ];
        let sunday = 6;
        let today = (sunday + 7 * 2 - (2 + 7)) % 7;
        assert_eq!(question("word-6").answer, WEEK[today]);
    }

    #[test]
    fn ids_are_unique_and_numbers_parse() {
        let mut ids: Vec<&str> = QUESTIONS.iter().map(|q| q.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), QUESTIONS.len());
        for q in QUESTIONS.iter().filter(|q| q.check == Number) {
            assert!(q.answer.parse::<f64>().is_ok(), "{}", q.id);
        }
        let summary = ProbeSummary::of(&[
            grade(question("fact-3"), reply("Answer: 8")),
            grade(question("fact-1"), reply("Answer: Tu")),
        ]);
        assert_eq!(
            (summary.passed, summary.answered, summary.pass_rate),
            (1, 2, Some(0.5))
        );
        assert_eq!(summary.by_category.get("facts"), Some(&(1, 2)));
    }
}
