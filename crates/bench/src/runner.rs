//! Runs a benchmark: every step's cold run and warm runs in order, each run's prompts built
//! (and, at depth, each request's context primed into the cache) before its clock starts, its
//! requests sent together or at seeded Poisson arrivals, the engine's counters read around it.
//! After every run the step so far goes to a [`StepSink`], so what was measured is kept however
//! the benchmark ends: finished, failed (an endpoint that refuses every request of a run),
//! or cancelled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::endpoint::Endpoint;
use crate::engine_metrics::Scraper;
use crate::prompt::{PromptBook, Tokenizer};
use crate::request::{self, Sample};
use crate::result::{EngineDeltas, RunResult, StepResult, StepSummary};
use crate::spec::{BenchSpec, Load, Point};

/// Where steps go as they progress (the daemon stores them and tells the UI). The runner waits
/// for each report to be taken, so a sink that falls behind slows the benchmark down between
/// runs rather than piling reports up.
pub trait StepSink: Send + Sync {
    /// A run of `step` finished, or the step completed.
    fn step(&self, step: &StepResult) -> impl std::future::Future<Output = ()> + Send;
}

/// How a benchmark ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Why it stopped (every request of a run failed, or prompts could not be built).
    Failed(String),
    Cancelled,
}

/// A benchmark ready to run against one endpoint.
pub struct Runner {
    client: reqwest::Client,
    endpoint: Arc<Endpoint>,
    spec: BenchSpec,
    book: PromptBook,
    scraper: Option<Scraper>,
    next_request: u64,
}

/// Cold and warm: the first run of a step is index 0.
fn run_seed(seed: u64, step: u32, run: u32) -> u64 {
    seed ^ (u64::from(step) << 32) ^ u64::from(run).wrapping_mul(0x9E37_79B9)
}

impl Runner {
    /// Checks the spec and looks for the engine's tokenizer.
    pub async fn prepare(endpoint: Endpoint, spec: BenchSpec) -> Result<Runner, String> {
        spec.validate()?;
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(usize::MAX)
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        let tokenizer = Tokenizer::probe(&client, &endpoint).await;
        let scraper = endpoint
            .engine_url
            .as_deref()
            .map(|url| Scraper::new(client.clone(), url, endpoint.engine_key.clone()));
        Ok(Runner {
            client,
            book: PromptBook::new(spec.prompts, spec.seed, tokenizer),
            endpoint: Arc::new(endpoint),
            spec,
            scraper,
            next_request: 0,
        })
    }

    /// Whether prompt lengths come from the engine's tokenizer (else estimated).
    pub fn exact_prompts(&self) -> bool {
        self.book.exact()
    }

    /// Runs every step until done, failed or `cancel` turns true.
    pub async fn run(
        &mut self,
        sink: &impl StepSink,
        mut cancel: watch::Receiver<bool>,
    ) -> Outcome {
        for (index, point) in self.spec.points().into_iter().enumerate() {
            let mut step = StepResult {
                index: index as u32,
                point,
                runs: Vec::new(),
                summary: None,
                complete: false,
            };
            for run in 0..self.spec.runs_per_step() {
                let result = tokio::select! {
                    result = self.run_once(&point, step.index, run) => result,
                    Ok(_) = cancel.wait_for(|c| *c) => return Outcome::Cancelled,
                };
                let result = match result {
                    Ok(result) => result,
                    Err(message) => return Outcome::Failed(message),
                };
                let every_request_failed = result.ok == 0;
                let first_error = result.requests.iter().find_map(|s| s.error.clone());
                step.runs.push(result);
                step.summary = Some(StepSummary::new(&step.runs, self.spec.min_acceptance));
                sink.step(&step).await;
                if every_request_failed {
                    let why = first_error.unwrap_or_else(|| "no request succeeded".into());
                    return Outcome::Failed(format!(
                        "every request of run {run} of step {} ({point}) failed: {why}",
                        index + 1
                    ));
                }
            }
            step.complete = true;
            sink.step(&step).await;
        }
        Outcome::Done
    }

    async fn run_once(&mut self, point: &Point, step: u32, run: u32) -> Result<RunResult, String> {
        let requests = self.requests(point).await?;
        self.prime(&requests).await;
        let before = match &self.scraper {
            Some(s) => s.read().await,
            None => None,
        };
        let offsets = arrivals(
            point.load,
            requests.len(),
            run_seed(self.spec.seed, step, run),
        );
        let url = self.endpoint.route(self.spec.api);
        let timeout = Duration::from_secs(self.spec.request_timeout_s);
        let start = Instant::now();
        let mut tasks = JoinSet::new();
        for (planned, offset) in requests.into_iter().zip(offsets) {
            let (client, url, endpoint) = (self.client.clone(), url.clone(), self.endpoint.clone());
            tasks.spawn(async move {
                tokio::time::sleep_until((start + offset).into()).await;
                let key = endpoint.api_key.as_deref();
                request::send(&client, &url, key, planned.body, timeout, start).await
            });
        }
        let mut samples: Vec<Sample> = Vec::with_capacity(tasks.len());
        while let Some(joined) = tasks.join_next().await {
            samples.push(joined.unwrap_or_else(|e| Sample {
                error: Some(format!("the request's task ended: {e}")),
                ..Sample::default()
            }));
        }
        let wall_ms = start.elapsed().as_secs_f64() * 1000.0;
        samples.sort_by(|a, b| a.offset_ms.total_cmp(&b.offset_ms));
        let deltas = match (&self.scraper, before) {
            (Some(s), Some(before)) => s
                .read()
                .await
                .map(|after| after.since(&before))
                .unwrap_or_default(),
            _ => EngineDeltas::default(),
        };
        Ok(RunResult::new(
            run,
            wall_ms,
            samples,
            &self.spec.slo,
            deltas,
        ))
    }

    /// The bodies of one run's requests (and their priming requests at depth).
    async fn requests(&mut self, point: &Point) -> Result<Vec<Planned>, String> {
        let count = point.requests(&self.spec);
        let mut planned = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let index = if self.spec.unique_prefixes {
                self.next_request
            } else {
                0
            };
            self.next_request += 1;
            let prompt = self
                .book
                .prompt(
                    point.shape.prompt_tokens as usize,
                    index,
                    self.spec.unique_prefixes,
                )
                .await;
            let prompt = prompt.map_err(|e| {
                format!(
                    "cannot build a prompt of {} tokens: {e}",
                    point.shape.prompt_tokens
                )
            })?;
            let (text, prime) = if point.depth > 0 {
                let context = self.book.context(point.depth as usize, index).await;
                let context = context.map_err(|e| {
                    format!("cannot build a context of {} tokens: {e}", point.depth)
                })?;
                let prime = self
                    .endpoint
                    .body(self.spec.api, &context.text, 1, 0.0, false)
                    .to_string()
                    .into_bytes();
                (format!("{}\n\n{}", context.text, prompt.text), Some(prime))
            } else {
                (prompt.text, None)
            };
            let body = self.endpoint.body(
                self.spec.api,
                &text,
                point.shape.output_tokens,
                self.spec.temperature,
                self.spec.force_output,
            );
            let body = body.to_string().into_bytes();
            planned.push(Planned { body, prime });
        }
        Ok(planned)
    }

    /// Puts each request's context in the engine's cache before the clock starts.
    async fn prime(&self, requests: &[Planned]) {
        let url = self.endpoint.route(self.spec.api);
        let timeout = Duration::from_secs(self.spec.request_timeout_s);
        let mut tasks = JoinSet::new();
        for body in requests.iter().filter_map(|p| p.prime.clone()) {
            let (client, url, endpoint) = (self.client.clone(), url.clone(), self.endpoint.clone());
            tasks.spawn(async move {
                let sample = request::send(
                    &client,
                    &url,
                    endpoint.api_key.as_deref(),
                    body,
                    timeout,
                    Instant::now(),
                )
                .await;
                if let Some(error) = sample.error {
                    tracing::warn!(
                        "priming a context failed (the request is measured uncached): {error}"
                    );
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }
}

/// One request of a run, its bodies serialized before the clock starts.
struct Planned {
    body: Vec<u8>,
    prime: Option<Vec<u8>>,
}

/// When each request is sent, from the run's start: all at once for a concurrency step,
/// Poisson arrivals (exponential gaps, seeded) for a rate step.
fn arrivals(load: Load, count: usize, seed: u64) -> Vec<Duration> {
    match load {
        Load::Concurrency(_) => vec![Duration::ZERO; count],
        Load::Rate(rate) => {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut at = 0.0f64;
            (0..count)
                .map(|i| {
                    if i > 0 {
                        let uniform: f64 = rng.random_range(f64::EPSILON..1.0);
                        at += -uniform.ln() / rate;
                    }
                    Duration::from_secs_f64(at)
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_average_the_rate_and_repeat_for_a_seed() {
        let offsets = arrivals(Load::Rate(4.0), 4001, 9);
        let last = offsets.last().expect("offsets").as_secs_f64();
        assert!(
            (last / 4000.0 - 0.25).abs() < 0.02,
            "mean gap {}",
            last / 4000.0
        );
        assert_eq!(offsets, arrivals(Load::Rate(4.0), 4001, 9));
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            arrivals(Load::Concurrency(3), 3, 1),
            vec![Duration::ZERO; 3]
        );
    }
}
