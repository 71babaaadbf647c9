//! What a benchmark measured: each run's requests and figures (aggregate and per-stream tok/s,
//! TTFT, prefill speed, speculative acceptance, cache hits, goodput), and each step's summary
//! across its warm runs. The cold run is kept and shown, never folded into the warm figures.

use serde::{Deserialize, Serialize};

use crate::request::Sample;
use crate::spec::{Point, Slo};
use crate::stats::Stats;

/// Speculative decoding in one run: draft tokens proposed and accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Acceptance {
    pub drafted: u64,
    pub accepted: u64,
    /// Draft rounds, where the engine counts them (vLLM); gives the mean acceptance length.
    pub drafts: Option<u64>,
    /// What an engine that counts nothing reports instead (SGLang's gauges, averaged over its
    /// latest batches and read at the end of the run): the acceptance rate and mean length.
    #[serde(default)]
    pub reported_rate: Option<f64>,
    #[serde(default)]
    pub reported_length: Option<f64>,
}

impl Acceptance {
    /// accepted / drafted, or the engine's own figure.
    pub fn rate(&self) -> Option<f64> {
        if self.drafted > 0 {
            return Some(self.accepted as f64 / self.drafted as f64);
        }
        self.reported_rate
    }

    /// 1 + accepted / draft rounds, or the engine's own figure.
    pub fn mean_length(&self) -> Option<f64> {
        match self.drafts.filter(|d| *d > 0) {
            Some(d) => Some(1.0 + self.accepted as f64 / d as f64),
            None => self.reported_length,
        }
    }
}

/// One run: `requests` sent together (or at Poisson arrivals), until the last one ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// 0 is the cold run.
    pub index: u32,
    pub cold: bool,
    pub wall_ms: f64,
    pub ok: u32,
    pub failed: u32,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// All output tokens over the run's wall time.
    pub aggregate_tps: Option<f64>,
    /// Prompt and output tokens over the wall time.
    pub total_tps: Option<f64>,
    /// Median of the requests' 1 / TPOT.
    pub stream_tps: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub prefill_tps: Option<f64>,
    /// Median of the engine's own decode speed (llama.cpp's `predicted_per_second`).
    pub engine_decode_tps: Option<f64>,
    pub acceptance: Option<Acceptance>,
    /// Prompt tokens the engine took from its cache, as a fraction of all prompt tokens.
    pub cache_hit_rate: Option<f64>,
    /// Requests that met every latency target, per second of wall time.
    pub goodput_rps: Option<f64>,
    /// Requests completed per second of wall time.
    pub request_rps: Option<f64>,
    pub requests: Vec<Sample>,
}

/// Engine counters read around a run (vLLM's Prometheus metrics), as deltas.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineDeltas {
    pub acceptance: Option<Acceptance>,
    /// (hits, queries) in tokens.
    pub prefix_cache: Option<(f64, f64)>,
}

impl RunResult {
    /// The run's figures from its requests, wall time and the engine's counters.
    pub fn new(
        index: u32,
        wall_ms: f64,
        requests: Vec<Sample>,
        slo: &Slo,
        engine: EngineDeltas,
    ) -> Self {
        let ok: Vec<&Sample> = requests.iter().filter(|s| s.ok).collect();
        let prompt_tokens: u64 = ok.iter().filter_map(|s| s.prompt_tokens).sum();
        let output_tokens: u64 = ok.iter().filter_map(|s| s.output_tokens).sum();
        let cached: u64 = ok.iter().filter_map(|s| s.cached_tokens).sum();
        let seconds = wall_ms / 1000.0;
        let per_second = |n: f64| (seconds > 0.0 && !ok.is_empty()).then(|| n / seconds);
        let median = |f: fn(&Sample) -> Option<f64>| {
            Stats::of(ok.iter().filter_map(|s| f(s))).map(|s| s.median)
        };
        let reports_cache = ok.iter().any(|s| s.cached_tokens.is_some());
        let cache_hit_rate = match engine.prefix_cache {
            Some((hits, queries)) if queries > 0.0 => Some(hits / queries),
            _ => (reports_cache && prompt_tokens > 0).then(|| cached as f64 / prompt_tokens as f64),
        };
        RunResult {
            index,
            cold: index == 0,
            wall_ms,
            ok: ok.len() as u32,
            failed: (requests.len() - ok.len()) as u32,
            prompt_tokens,
            output_tokens,
            aggregate_tps: per_second(output_tokens as f64),
            total_tps: per_second((prompt_tokens + output_tokens) as f64),
            stream_tps: median(Sample::stream_tps),
            ttft_ms: median(|s| s.ttft_ms),
            prefill_tps: median(Sample::prefill_tps),
            engine_decode_tps: median(|s| s.engine_decode_tps),
            acceptance: engine.acceptance.or_else(|| drafts_reported(&ok)),
            cache_hit_rate,
            goodput_rps: slo
                .is_set()
                .then(|| per_second(ok.iter().filter(|s| meets(s, slo)).count() as f64))
                .flatten(),
            request_rps: per_second(ok.len() as f64),
            requests,
        }
    }
}

/// llama.cpp reports drafts per request in `timings`.
fn drafts_reported(ok: &[&Sample]) -> Option<Acceptance> {
    let drafted: u64 = ok.iter().filter_map(|s| s.draft_tokens).sum();
    let accepted: u64 = ok.iter().filter_map(|s| s.draft_accepted).sum();
    (drafted > 0).then_some(Acceptance {
        drafted,
        accepted,
        ..Acceptance::default()
    })
}

/// Whether a request met every latency target that is set.
pub fn meets(sample: &Sample, slo: &Slo) -> bool {
    let within = |value: Option<f64>, target: Option<f64>| match target {
        None => true,
        Some(t) => value.is_some_and(|v| v <= t),
    };
    sample.ok
        && within(sample.ttft_ms, slo.ttft_ms)
        && within(sample.tpot_ms, slo.tpot_ms)
        && within(Some(sample.e2e_ms), slo.e2e_ms)
}

/// A step's figures across its warm runs (the cold run alone when there are none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    /// Runs summarized.
    pub runs: u32,
    pub failed_requests: u32,
    /// Across runs.
    pub aggregate_tps: Option<Stats>,
    /// Across runs (each run's median stream).
    pub stream_tps: Option<Stats>,
    /// Across every request of the runs.
    pub ttft_ms: Option<Stats>,
    pub tpot_ms: Option<Stats>,
    pub e2e_ms: Option<Stats>,
    /// Across every gap between text chunks.
    pub itl_ms: Option<Stats>,
    pub prefill_tps: Option<Stats>,
    pub engine_decode_tps: Option<Stats>,
    pub prompt_tokens: Option<Stats>,
    pub output_tokens: Option<Stats>,
    /// Across runs: acceptance rate and mean acceptance length.
    pub acceptance: Option<Stats>,
    pub acceptance_length: Option<Stats>,
    /// Runs whose acceptance was under the spec's minimum.
    pub runs_below_acceptance: Option<u32>,
    pub cache_hit_rate: Option<Stats>,
    pub goodput_rps: Option<Stats>,
}

impl StepSummary {
    /// Summarizes `runs` (cold and warm; the cold one is left out when warm ones exist). The
    /// inter-token gaps come from the requests as measured (they are not stored).
    pub fn new(runs: &[RunResult], min_acceptance: f64) -> Self {
        let warm: Vec<&RunResult> = if runs.iter().any(|r| !r.cold) {
            runs.iter().filter(|r| !r.cold).collect()
        } else {
            runs.iter().collect()
        };
        let across = |f: fn(&RunResult) -> Option<f64>| Stats::of(warm.iter().filter_map(|r| f(r)));
        let requests = || warm.iter().flat_map(|r| r.requests.iter()).filter(|s| s.ok);
        let of_requests = |f: fn(&Sample) -> Option<f64>| Stats::of(requests().filter_map(f));
        let rates: Vec<f64> = warm.iter().filter_map(|r| r.acceptance?.rate()).collect();
        StepSummary {
            runs: warm.len() as u32,
            failed_requests: warm.iter().map(|r| r.failed).sum(),
            aggregate_tps: across(|r| r.aggregate_tps),
            stream_tps: across(|r| r.stream_tps),
            ttft_ms: of_requests(|s| s.ttft_ms),
            tpot_ms: of_requests(|s| s.tpot_ms),
            e2e_ms: of_requests(|s| Some(s.e2e_ms)),
            itl_ms: Stats::of(requests().flat_map(|s| s.itl_ms.iter().copied())),
            prefill_tps: of_requests(Sample::prefill_tps),
            engine_decode_tps: of_requests(|s| s.engine_decode_tps),
            prompt_tokens: of_requests(|s| s.prompt_tokens.map(|n| n as f64)),
            output_tokens: of_requests(|s| s.output_tokens.map(|n| n as f64)),
            runs_below_acceptance: (!rates.is_empty())
                .then(|| rates.iter().filter(|r| **r < min_acceptance).count() as u32),
            acceptance: Stats::of(rates),
            acceptance_length: across(|r| r.acceptance?.mean_length()),
            cache_hit_rate: across(|r| r.cache_hit_rate),
            goodput_rps: across(|r| r.goodput_rps),
        }
    }
}

/// One step: its coordinates, every run so far, and the summary of those runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub index: u32,
    pub point: Point,
    pub runs: Vec<RunResult>,
    pub summary: Option<StepSummary>,
    /// Every run of the step finished (false while it runs, or when the benchmark ended early).
    pub complete: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ttft: f64, e2e: f64, out: u64) -> Sample {
        Sample {
            ok: true,
            ttft_ms: Some(ttft),
            e2e_ms: e2e,
            tpot_ms: Some((e2e - ttft) / (out - 1) as f64),
            prompt_tokens: Some(100),
            output_tokens: Some(out),
            ..Sample::default()
        }
    }

    #[test]
    fn a_run_adds_streams_up_and_counts_goodput() {
        let slo = Slo {
            ttft_ms: Some(100.0),
            ..Slo::default()
        };
        let failed = Sample {
            error: Some("refused".into()),
            ..Sample::default()
        };
        let run = RunResult::new(
            1,
            2000.0,
            vec![
                sample(50.0, 1050.0, 101),
                sample(150.0, 2000.0, 101),
                failed,
            ],
            &slo,
            EngineDeltas::default(),
        );
        assert_eq!((run.ok, run.failed, run.output_tokens), (2, 1, 202));
        assert_eq!(run.aggregate_tps, Some(101.0));
        assert_eq!(run.goodput_rps, Some(0.5));
        assert_eq!(run.request_rps, Some(1.0));
        // streams at 100 and 54.05 tok/s: the median of two is their mean
        let expected = (100.0 + 100.0 / 1.85) / 2.0;
        assert!((run.stream_tps.expect("streams") - expected).abs() < 1e-9);
        assert!(run.cache_hit_rate.is_none());
        assert!(!run.cold);
    }

    #[test]
    fn the_summary_leaves_the_cold_run_out_and_counts_low_acceptance() {
        let run = |index: u32, tps: f64, accepted: u64| RunResult {
            aggregate_tps: Some(tps),
            acceptance: Some(Acceptance {
                drafted: 100,
                accepted,
                drafts: Some(25),
                ..Acceptance::default()
            }),
            ..RunResult::new(
                index,
                1000.0,
                vec![sample(10.0, 110.0, 11)],
                &Slo::default(),
                EngineDeltas::default(),
            )
        };
        let mut runs = vec![
            run(0, 1.0, 90),
            run(1, 10.0, 70),
            run(2, 12.0, 50),
            run(3, 11.0, 80),
        ];
        runs[1].requests[0].itl_ms = vec![10.0, 12.0];
        let summary = StepSummary::new(&runs, 0.6);
        assert_eq!(summary.runs, 3);
        assert_eq!(summary.aggregate_tps.map(|s| s.median), Some(11.0));
        assert_eq!(summary.runs_below_acceptance, Some(1));
        assert_eq!(
            summary.acceptance_length.map(|s| s.median),
            Some(1.0 + 70.0 / 25.0)
        );
        assert_eq!(summary.itl_ms.map(|s| s.n), Some(2));
    }
}
