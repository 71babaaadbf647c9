//! What a benchmark does: the workload shapes, context depths, load points (concurrent streams
//! or a Poisson request rate), how many warm runs, where prompts come from, latency targets.
//! Parsed from the API's JSON and the command line; checked before anything is sent.

use serde::{Deserialize, Serialize};

/// Prompt tokens → output tokens, written `2048:512`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

impl std::str::FromStr for Shape {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!("workload shape '{text}' is not PROMPT:OUTPUT tokens, e.g. 2048:512 (2048 prompt tokens, 512 output tokens)")
        };
        let (prompt, output) = text.split_once(':').ok_or_else(bad)?;
        Ok(Shape {
            prompt_tokens: prompt.trim().parse().map_err(|_| bad())?,
            output_tokens: output.trim().parse().map_err(|_| bad())?,
        })
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.prompt_tokens, self.output_tokens)
    }
}

/// Where prompts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptSource {
    /// Seeded random words: cheap and exact, but they overstate speculative acceptance.
    #[default]
    Synthetic,
    /// Built-in tasks (code review, reasoning, summarization, structured output) over real text.
    Realistic,
}

/// Which OpenAI route the requests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `/v1/chat/completions`: what chat clients send (the chat template adds a few tokens).
    #[default]
    Chat,
    /// `/v1/completions`: the prompt exactly as built.
    Completions,
}

/// Latency targets for goodput: a request counts when it meets every target that is set.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slo {
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.tpot_ms.is_some() || self.e2e_ms.is_some()
    }
}

/// A whole benchmark: every shape × depth × load point is a step; each step is one cold run
/// and `warm_runs` warm ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchSpec {
    pub shapes: Vec<Shape>,
    /// Tokens of context already in the cache before each measured request (llama-bench's
    /// `-d`): each request first primes its own context of this many tokens, then asks.
    pub depths: Vec<u32>,
    /// Closed loop: this many requests at once per run, one point per value.
    pub concurrency: Vec<u32>,
    /// Open loop instead (when not empty): Poisson arrivals at these requests per second.
    pub rates: Vec<f64>,
    /// Requests per run in rate mode.
    pub rate_requests: u32,
    pub warm_runs: u32,
    pub prompts: PromptSource,
    pub api: Api,
    /// A distinct opening per request, so no request finds another's prompt in the cache.
    pub unique_prefixes: bool,
    /// Ask the engine to generate exactly `output_tokens` (`ignore_eos`, `min_tokens`).
    pub force_output: bool,
    pub temperature: f64,
    pub slo: Slo,
    /// A run whose speculative acceptance is below this is counted (001 counted runs under 60 %).
    pub min_acceptance: f64,
    pub seed: u64,
    /// One request's limit, in seconds.
    pub request_timeout_s: u64,
}

impl Default for BenchSpec {
    fn default() -> Self {
        BenchSpec {
            shapes: vec![Shape {
                prompt_tokens: 256,
                output_tokens: 512,
            }],
            depths: vec![0],
            concurrency: vec![1],
            rates: Vec::new(),
            rate_requests: 32,
            warm_runs: 10,
            prompts: PromptSource::Synthetic,
            api: Api::Chat,
            unique_prefixes: true,
            force_output: true,
            temperature: 0.0,
            slo: Slo::default(),
            min_acceptance: 0.6,
            seed: 1,
            request_timeout_s: 600,
        }
    }
}

/// Bounds that keep a typo from queueing a week of work.
const MAX_TOKENS: u32 = 1 << 20;
const MAX_STREAMS: u32 = 1024;
const MAX_WARM_RUNS: u32 = 1000;
const MAX_STEPS: usize = 1000;

impl BenchSpec {
    /// Checks the spec; the message names the field and the fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.shapes.is_empty() {
            return Err("no workload shape: give at least one, e.g. 2048:512".into());
        }
        for shape in &self.shapes {
            if shape.prompt_tokens == 0 || shape.output_tokens == 0 {
                return Err(format!(
                    "workload shape {shape}: prompt and output tokens must both be at least 1"
                ));
            }
            if shape.prompt_tokens > MAX_TOKENS || shape.output_tokens > MAX_TOKENS {
                return Err(format!(
                    "workload shape {shape}: at most {MAX_TOKENS} tokens each"
                ));
            }
        }
        if self.depths.is_empty() {
            return Err("no context depth: use 0 for an empty context".into());
        }
        if let Some(d) = self.depths.iter().find(|d| **d > MAX_TOKENS) {
            return Err(format!("context depth {d}: at most {MAX_TOKENS} tokens"));
        }
        if self.rates.is_empty() {
            if self.concurrency.is_empty() {
                return Err(
                    "no load point: give concurrency values (1,2,4,8) or request rates".into(),
                );
            }
            if let Some(c) = self
                .concurrency
                .iter()
                .find(|c| **c == 0 || **c > MAX_STREAMS)
            {
                return Err(format!("concurrency {c}: use 1 to {MAX_STREAMS} streams"));
            }
        } else {
            if let Some(r) = self.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
                return Err(format!(
                    "request rate {r}: use a positive number of requests per second"
                ));
            }
            if self.rate_requests == 0 || self.rate_requests > MAX_STREAMS * 16 {
                return Err(format!(
                    "requests per rate run {}: use 1 to {}",
                    self.rate_requests,
                    MAX_STREAMS * 16
                ));
            }
        }
        if self.warm_runs > MAX_WARM_RUNS {
            return Err(format!(
                "warm runs {}: at most {MAX_WARM_RUNS}",
                self.warm_runs
            ));
        }
        if !(0.0..=2.0).contains(&self.temperature) {
            return Err(format!("temperature {}: use 0 to 2", self.temperature));
        }
        if !(0.0..=1.0).contains(&self.min_acceptance) {
            return Err(format!(
                "minimum acceptance {}: use a fraction from 0 to 1 (0.6 = 60 %)",
                self.min_acceptance
            ));
        }
        if self.request_timeout_s == 0 {
            return Err("request timeout 0 s: use at least 1 s".into());
        }
        let steps = self.points().len();
        if steps > MAX_STEPS {
            return Err(format!("{steps} steps (shapes × depths × load points): at most {MAX_STEPS}; split the benchmark"));
        }
        Ok(())
    }

    /// Every step, in the order they run: shape, then depth, then load.
    pub fn points(&self) -> Vec<Point> {
        let loads: Vec<Load> = if self.rates.is_empty() {
            self.concurrency
                .iter()
                .map(|c| Load::Concurrency(*c))
                .collect()
        } else {
            self.rates.iter().map(|r| Load::Rate(*r)).collect()
        };
        let mut points = Vec::new();
        for shape in &self.shapes {
            for depth in &self.depths {
                for load in &loads {
                    points.push(Point {
                        shape: *shape,
                        depth: *depth,
                        load: *load,
                    });
                }
            }
        }
        points
    }

    /// Runs per step: the cold one and the warm ones.
    pub fn runs_per_step(&self) -> u32 {
        1 + self.warm_runs
    }
}

/// How requests arrive in a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// This many requests sent at once; the run ends when all have.
    Concurrency(u32),
    /// Requests per second, Poisson arrivals.
    Rate(f64),
}

/// One step's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub shape: Shape,
    pub depth: u32,
    pub load: Load,
}

impl Point {
    /// Requests in one run of this step.
    pub fn requests(&self, spec: &BenchSpec) -> u32 {
        match self.load {
            Load::Concurrency(c) => c,
            Load::Rate(_) => spec.rate_requests,
        }
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.shape)?;
        if self.depth > 0 {
            write!(f, " @ depth {}", self.depth)?;
        }
        match self.load {
            Load::Concurrency(c) => write!(f, ", {c} stream{}", if c == 1 { "" } else { "s" }),
            Load::Rate(r) => write!(f, ", {r} req/s"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_bad_ones_say_the_form() {
        assert_eq!(
            "2048:64".parse::<Shape>(),
            Ok(Shape {
                prompt_tokens: 2048,
                output_tokens: 64
            })
        );
        let err = "2048x64".parse::<Shape>().expect_err("not a shape");
        assert!(err.contains("PROMPT:OUTPUT"), "{err}");
    }

    #[test]
    fn points_cover_shapes_depths_and_loads_in_order() {
        let spec = BenchSpec {
            shapes: vec![
                "256:512".parse().expect("shape"),
                "2048:64".parse().expect("shape"),
            ],
            depths: vec![0, 4096],
            concurrency: vec![1, 8],
            ..BenchSpec::default()
        };
        let points = spec.points();
        assert_eq!(points.len(), 8);
        assert_eq!(points[1].load, Load::Concurrency(8));
        assert_eq!(points[2].depth, 4096);
        assert_eq!(points[4].shape.prompt_tokens, 2048);
        assert_eq!(points[3].to_string(), "256:512 @ depth 4096, 8 streams");
        let rates = BenchSpec {
            rates: vec![0.5, 2.0],
            ..spec
        };
        assert_eq!(rates.points()[1].load, Load::Rate(2.0));
        assert_eq!(rates.points()[1].requests(&rates), 32);
    }

    #[test]
    fn bad_specs_name_the_field() {
        let check = |spec: BenchSpec, needle: &str| {
            let err = spec.validate().expect_err("invalid");
            assert!(err.contains(needle), "{err}");
        };
        check(
            BenchSpec {
                shapes: vec![],
                ..BenchSpec::default()
            },
            "shape",
        );
        check(
            BenchSpec {
                concurrency: vec![0],
                ..BenchSpec::default()
            },
            "concurrency 0",
        );
        check(
            BenchSpec {
                rates: vec![-1.0],
                ..BenchSpec::default()
            },
            "request rate -1",
        );
        check(
            BenchSpec {
                min_acceptance: 60.0,
                ..BenchSpec::default()
            },
            "fraction",
        );
        check(
            BenchSpec {
                depths: vec![],
                ..BenchSpec::default()
            },
            "depth",
        );
        assert!(BenchSpec::default().validate().is_ok());
        let unknown =
            serde_json::from_str::<BenchSpec>(r#"{"warm":3}"#).expect_err("unknown field");
        assert!(unknown.to_string().contains("warm"));
    }
}
