//! Rigdeck's benchmarks: serving runs against any OpenAI-compatible endpoint, measured the way
//! `vllm bench serve`, SGLang and llama-benchy define their figures (see
//! `shared/reference/benchmarks.md`): prompts of an exact token count from the engine's own
//! tokenizer, forced output lengths, context depth, concurrency sweeps and Poisson request
//! rates, one cold run and N warm runs per step with nothing discarded, statistics, and every
//! run kept in SQLite with its context. This crate knows nothing of processes or GPUs: the
//! daemon resolves targets to [`endpoint::Endpoint`]s and supplies the hardware context.

pub mod endpoint;
pub mod engine_metrics;
pub mod kld;
pub mod llama_bench;
pub mod prompt;
pub mod quality;
pub mod report;
pub mod request;
pub mod result;
pub mod runner;
pub mod spec;
pub mod stats;
pub mod store;
pub mod tune;

pub use endpoint::{Endpoint, EngineKind};
pub use result::{RunResult, StepResult, StepSummary};
pub use runner::{Outcome, Runner, StepSink};
pub use spec::{BenchSpec, Load, Point, Shape};
pub use stats::Stats;
