// The benchmarks API's shapes (/api/v1/bench, crates/bench): what a benchmark does (BenchSpec for
// a speed benchmark, ProbeSpec for a quality probe), what it is pointed at (Target), a run as
// lists show it (RunSummary, also the `bench.run` event's data) and in full (RunDetail: context,
// telemetry, every run of every step, or every answer of a probe); and a tuning of a profile's
// knobs (TuneSpec, TuneView with its trials, also the `bench.tune` event's data).

import type { UnixMillis } from '../api/types';
import type { KldResult, KldSpec, NewKldRun } from '../quality/types';

/** Prompt tokens → output tokens, written `2048:512`. */
export interface Shape {
  prompt_tokens: number;
  output_tokens: number;
}

/** How requests arrive in a step: this many at once, or Poisson arrivals at this rate (req/s). */
export type Load = { concurrency: number } | { rate: number };

/** One step's coordinates. */
export interface Point {
  shape: Shape;
  /** Tokens of context already in the cache before each measured request. */
  depth: number;
  load: Load;
}

/** Latency targets for goodput: a request counts when it meets every target set. */
export interface Slo {
  ttft_ms?: number | null;
  tpot_ms?: number | null;
  e2e_ms?: number | null;
}

export type PromptSource = 'synthetic' | 'realistic';
export type BenchApi = 'chat' | 'completions';

/** Every field optional on input (the daemon fills in its defaults); unknown fields are refused. */
export interface BenchSpec {
  shapes?: Shape[];
  depths?: number[];
  concurrency?: number[];
  /** Not empty: rate mode (Poisson arrivals) instead of concurrency. */
  rates?: number[];
  /** Requests per run in rate mode. */
  rate_requests?: number;
  warm_runs?: number;
  prompts?: PromptSource;
  api?: BenchApi;
  unique_prefixes?: boolean;
  force_output?: boolean;
  temperature?: number;
  slo?: Slo;
  /** A fraction: 0.6 is 60 %. */
  min_acceptance?: number;
  seed?: number;
  request_timeout_s?: number;
}

/** What a benchmark is pointed at, as POST /bench/runs takes it. */
export type Target =
  | { kind: 'instance'; name: string }
  | { kind: 'profile'; name: string }
  | { kind: 'gateway'; model: string }
  | { kind: 'url'; url: string; api_key?: string; model: string };

export type TargetKind = Target['kind'];

/** The target as stored with a run: never the key (a URL target says `with_key` instead). */
export type TargetView = { kind?: string; name?: string; model?: string; url?: string; with_key?: boolean } & Record<string, unknown>;

/** A quality probe: generated questions with one exact answer each, asked at temperature 0.
 *  Every field optional on input (the daemon's defaults: 2048, 4, 600, 250, 1). */
export interface ProbeSpec {
  /** Room per reply for reasoning before the answer line. */
  max_tokens?: number;
  /** Questions asked at once. */
  concurrency?: number;
  request_timeout_s?: number;
  /** Questions generated, in turn from each category (5–5000). */
  count?: number;
  /** The generators' seed: probes of one seed ask the same questions. */
  seed?: number;
}

/** `serving`: a speed benchmark; `quality`: a quality probe; `llama_bench`: llama.cpp's own
 *  llama-bench with a profile's flags; `kld`: a profile's KL divergence from a quality reference
 *  (llama-perplexity, lib/quality). */
export type RunKind = 'serving' | 'quality' | 'llama_bench' | 'kld';

/** POST /bench/runs for a speed benchmark (the default kind). */
export interface NewSpeedRun {
  name?: string;
  kind?: 'serving';
  target: Target;
  spec: BenchSpec;
}

/** POST /bench/runs for a quality probe. */
export interface NewQualityProbe {
  name?: string;
  kind: 'quality';
  target: Target;
  probe: ProbeSpec;
}

/** What llama-bench measures (its `-p`, `-n`, `-d`, `-r`): each prompt size and each generation
 *  size at each depth, repeated. Every field optional on input (llama-bench's defaults: 512, 128,
 *  0, 5). */
export interface LlamaBenchSpec {
  prompt_tokens?: number[];
  gen_tokens?: number[];
  depths?: number[];
  repetitions?: number;
}

/** POST /bench/runs for llama-bench: the target must be a stopped llama.cpp profile. */
export interface NewLlamaBench {
  name?: string;
  kind: 'llama_bench';
  target: Target;
  llama_bench: LlamaBenchSpec;
}

/** POST /bench/runs. */
export type NewBenchmark = NewSpeedRun | NewQualityProbe | NewLlamaBench;

/** POST /bench/runs, from the form or the Quality section (a KLD run). */
export type NewRun = NewBenchmark | NewKldRun;

/** A 95 % (Wilson) interval of a pass rate, both ends 0–1. */
export interface RateInterval {
  low: number;
  high: number;
}

/** A quality probe's pass counts: overall, and `[passed, graded]` per category. Failed requests
 *  (timeouts, HTTP errors) are not graded: they are counted apart, never as wrong. */
export interface QualitySummary {
  /** Questions in the probe. */
  total: number;
  /** Questions done so far: graded, or their request failed. */
  answered: number;
  /** Answers with a reply to grade (answered − errors). */
  graded: number;
  passed: number;
  /** passed / graded, 0–1; null before any graded answer. */
  pass_rate: number | null;
  /** The pass rate's 95 % interval; null before any graded answer. */
  interval: RateInterval | null;
  /** Failed requests. */
  errors: number;
  by_category: Record<string, [number, number]>;
  category_intervals: Record<string, RateInterval>;
  /** Failed requests per category (categories with none left out). */
  category_errors: Record<string, number>;
}

/** GET /bench/compare-probes: two probes of one seed on the questions both got a reply to. */
export interface ProbeComparison {
  shared: number;
  base: { passed: number; pass_rate: number | null; interval: RateInterval | null };
  other: { passed: number; pass_rate: number | null; interval: RateInterval | null };
  both_passed: number;
  /** Passed by the base only. */
  base_only: number;
  /** Passed by the other only. */
  other_only: number;
  neither: number;
  /** McNemar's exact two-sided p-value of base_only against other_only. */
  p_value: number;
  verdict: 'base_better' | 'other_better' | 'not_distinguishable';
  /** Questions not asked of both, or whose request failed on either side. */
  left_out: number;
}

/** One question of a quality probe and what the model answered. */
export interface Answer {
  id: string;
  category: string;
  /** The question as asked (empty in probes stored before questions were generated). */
  question?: string;
  expected: string;
  /** The reply's answer line; null when it has none. */
  got: string | null;
  pass: boolean;
  /** The last 300 characters of the reply. */
  reply_tail: string;
  output_tokens: number | null;
  /** Cut at max_tokens before it answered. */
  truncated: boolean;
  error: string | null;
  duration_ms: number;
}

export type RunStatus = 'running' | 'done' | 'failed' | 'cancelled' | 'aborted';

/** One step in a run's list entry: where it stands and its headline medians (warm runs). */
export interface StepDigest {
  point: Point;
  runs: number;
  complete: boolean;
  aggregate_tps: number | null;
  stream_tps: number | null;
  ttft_ms: number | null;
  failed_requests: number;
}

/** A run as GET /bench/runs lists it and the `bench.run` event carries it. */
export interface RunSummary {
  id: number;
  name: string;
  kind: RunKind | (string & {});
  target: TargetView;
  /** By kind: a BenchSpec (serving), a ProbeSpec (quality) or a LlamaBenchSpec; read it through
   *  `speedSpec`, `probeSpec` or `llamaBenchSpec` (lib/bench/format). */
  spec: BenchSpec | ProbeSpec | LlamaBenchSpec | KldSpec;
  status: RunStatus | (string & {});
  error: string | null;
  /** False: prompt lengths were estimated, not counted by the engine's tokenizer (read it only
   *  when `prompts_known`). */
  exact_prompts: boolean;
  /** The tokenizer was asked (false at a run's start); absent from older daemons: known. */
  prompts_known?: boolean;
  started_at_ms: UnixMillis;
  finished_at_ms: UnixMillis | null;
  /** A speed benchmark's steps; empty for a quality probe. */
  steps: StepDigest[];
  /** Runs (serving) or questions answered (quality), of all. */
  runs_done: number;
  runs_total: number;
  /** A quality probe's pass counts; null for a speed benchmark. */
  quality?: QualitySummary | null;
  /** A KLD run's figures once it ended; null for the other kinds (absent from older daemons). */
  kld?: KldResult | null;
}

/** A sample's summary (numpy's linear percentiles; sample stdev; cv = stdev / mean). */
export interface Stats {
  n: number;
  mean: number;
  median: number;
  p10: number;
  p90: number;
  p99: number;
  min: number;
  max: number;
  stdev: number;
  cv: number;
}

/** Speculative decoding in one run: draft tokens proposed and accepted. */
export interface Acceptance {
  drafted: number;
  accepted: number;
  /** Draft rounds, where the engine counts them. */
  drafts: number | null;
  /** SGLang counts nothing: its own rate and mean length (gauges read after the run). */
  reported_rate?: number | null;
  reported_length?: number | null;
}

/** One request. Times are milliseconds from the start of its run. */
export interface Sample {
  offset_ms: number;
  ok: boolean;
  error?: string;
  ttft_ms: number | null;
  e2e_ms: number;
  tpot_ms: number | null;
  prompt_tokens: number | null;
  output_tokens: number | null;
  cached_tokens: number | null;
  output_counted: boolean;
  chunks: number;
  engine_decode_tps: number | null;
  engine_prompt_tps: number | null;
  draft_tokens: number | null;
  draft_accepted: number | null;
}

/** One run of a step: index 0 is the cold run. */
export interface RunResult {
  index: number;
  cold: boolean;
  wall_ms: number;
  ok: number;
  failed: number;
  prompt_tokens: number;
  output_tokens: number;
  aggregate_tps: number | null;
  total_tps: number | null;
  stream_tps: number | null;
  ttft_ms: number | null;
  prefill_tps: number | null;
  engine_decode_tps: number | null;
  acceptance: Acceptance | null;
  cache_hit_rate: number | null;
  goodput_rps: number | null;
  request_rps: number | null;
  requests: Sample[];
}

/** A step's figures across its warm runs (the cold run alone when there are none). */
export interface StepSummary {
  runs: number;
  failed_requests: number;
  aggregate_tps: Stats | null;
  stream_tps: Stats | null;
  ttft_ms: Stats | null;
  tpot_ms: Stats | null;
  e2e_ms: Stats | null;
  itl_ms: Stats | null;
  prefill_tps: Stats | null;
  engine_decode_tps: Stats | null;
  prompt_tokens: Stats | null;
  output_tokens: Stats | null;
  acceptance: Stats | null;
  acceptance_length: Stats | null;
  runs_below_acceptance: number | null;
  cache_hit_rate: Stats | null;
  goodput_rps: Stats | null;
}

export interface StepResult {
  index: number;
  point: Point;
  runs: RunResult[];
  summary: StepSummary | null;
  complete: boolean;
}

/** One GPU in a telemetry point; the hardware may not report any of it. */
export interface TelemetryGpu {
  index: number;
  name: string | null;
  util_pct: number | null;
  temp_c: number | null;
  sm_clock_mhz: number | null;
  power_w: number | null;
  mem_used_bytes: number | null;
}

/** The rig once a second during the run, `t_ms` after its start. */
export interface TelemetryPoint {
  t_ms: number;
  gpus: TelemetryGpu[] | null;
  cpu_util_pct: number | null;
}

/** GET /bench/runs/{id}. `context` is free-form: engine, command line, model, placement,
 *  hardware before and after. */
export interface RunDetail extends RunSummary {
  context: Record<string, unknown>;
  telemetry: TelemetryPoint[];
  /** A speed benchmark's steps; empty for a quality probe. */
  results: StepResult[];
  /** A quality probe's answers in question order; empty for a speed benchmark. */
  answers?: Answer[];
  /** llama-bench's tests, all at once at the end; empty for the other kinds. */
  tests?: LlamaBenchTest[];
}

/** One llama-bench test (`pp512 @ d0`, `tg128 @ d4096`): tok/s over its repetitions and what it
 *  ran on, as llama-bench reports it with every test. */
export interface LlamaBenchTest {
  test: string;
  n_prompt: number;
  n_gen: number;
  n_depth: number;
  /** llama-bench's mean tok/s over the repetitions, and its stdev. */
  avg_ts: number;
  stddev_ts: number;
  /** tok/s of each repetition. */
  samples_ts: number[];
  stats: Stats | null;
  build_commit?: string | null;
  build_number?: number | null;
  /** ggml backends compiled in: `CUDA`, `CPU`… */
  backends?: string | null;
  gpu_info?: string | null;
  cpu_info?: string | null;
  model_filename?: string | null;
  model_type?: string | null;
  model_size?: number | null;
  model_n_params?: number | null;
  n_threads?: number | null;
  n_gpu_layers?: number | null;
  n_cpu_moe?: number | null;
  n_batch?: number | null;
  n_ubatch?: number | null;
  type_k?: string | null;
  type_v?: string | null;
  split_mode?: string | null;
  main_gpu?: number | null;
  /** `on`, `off` or `auto`. */
  flash_attn?: string | null;
  no_kv_offload?: boolean | null;
  tensor_split?: string | null;
  tensor_buft_overrides?: string | null;
  devices?: string | null;
  test_time?: string | null;
}

/** GET /bench/runs/{id}/export?format=… */
export type ExportFormat = 'csv' | 'json' | 'md';

// ---- Tuning (/api/v1/bench/tunes) ----

/** Every value from `from` to `to` by `step`. */
export interface TuneRange {
  from: number;
  to: number;
  step: number;
}

/** A knob (`threads`, `ubatch`, …, or any engine flag like `--draft-min`) and its values, or a
 *  range instead. Values come back as text whatever was sent. */
export interface TuneKnob {
  name: string;
  values?: (string | number)[];
  range?: TuneRange | null;
}

/** walk: one knob at a time from the best so far, upward, stopping at the first value worse
 *  beyond the noise or failing; grid: every combination. */
export type TuneStrategy = 'walk' | 'grid';

/** The figure trials are judged by; TTFT: lower is better. */
export type TuneObjective = 'aggregate_tps' | 'stream_tps' | 'prefill_tps' | 'ttft_ms';

/** Every field optional on input but the knobs (the daemon's defaults: walk, aggregate_tps, one
 *  512:128 point at 1 stream with 5 warm runs, 24 trials at most). */
export interface TuneSpec {
  knobs: TuneKnob[];
  strategy?: TuneStrategy;
  objective?: TuneObjective;
  /** One workload point (one shape, depth and concurrency), at least 3 warm runs. */
  bench?: BenchSpec;
  /** 1–64. */
  max_trials?: number;
  /** Trials are measured for KL divergence too; the best must stay under the bound. */
  quality_floor?: QualityFloor | null;
}

/** A recorded reference's id and the highest mean KLD allowed; no bound: no worse than the
 *  profile as saved by more than twice the larger uncertainty of the two. */
export interface QualityFloor {
  reference: string;
  max_mean_kld?: number | null;
}

/** POST /bench/tunes. */
export interface NewTune {
  name?: string;
  /** A saved launch profile: its engine is restarted with each trial's values. */
  profile: string;
  spec: TuneSpec;
}

export type TrialOutcome = 'running' | 'measured' | 'out_of_memory' | 'crashed' | 'failed' | 'cancelled';

export type Verdict = 'baseline' | 'better' | 'within_noise' | 'worse' | 'broke_floor' | 'failed';

/** A trial's KL divergence from the floor's reference and the bound it was held to. */
export interface TrialKld {
  mean: number;
  mean_unc: number;
  /** Share of tokens whose top candidate is the reference's, 0–1. */
  same_top: number;
  /** The KLD benchmark run that measured it. */
  run_id: number;
  /** The earlier trial (index) whose figure this is: only threads, batch sizes or placement differ. */
  same_numerics_as: number | null;
  bound: number | null;
  within: boolean | null;
}

/** A trial against the best so far; the reason gives the figures behind it. */
export interface Decision {
  verdict: Verdict | (string & {});
  reason: string;
}

/** One trial: the profile with some knobs changed (none: the baseline), restarted and benchmarked. */
export interface Trial {
  index: number;
  values: Record<string, string>;
  outcome: TrialOutcome | (string & {});
  /** The benchmark run that measured it. */
  run_id: number | null;
  command_line: string | null;
  /** The objective across the warm runs. */
  objective: Stats | null;
  decision: Decision | null;
  error: string | null;
  /** Its KL divergence (tunings with a quality floor only). */
  kld?: TrialKld | null;
  started_at_ms: UnixMillis;
  finished_at_ms: UnixMillis | null;
}

/** The trial that beat the baseline beyond the noise last, and by how much. */
export interface TuneBest {
  trial: number;
  values: Record<string, string>;
  objective: Stats;
  baseline: Stats;
  /** Positive is better, whatever the objective's direction. */
  gain_percent: number;
  /** Its KL divergence under the floor (tunings with a quality floor only). */
  kld?: TrialKld | null;
}

/** A tuning as GET /bench/tunes lists it and the `bench.tune` event carries it. */
export interface TuneView {
  id: number;
  name: string;
  profile: string;
  spec: TuneSpec;
  status: RunStatus | (string & {});
  error: string | null;
  trials: Trial[];
  /** At most this many trials (a walk may stop earlier). */
  trials_planned: number;
  best: TuneBest | null;
  /** The profile the best values were saved as. */
  saved_profile: string | null;
  started_at_ms: UnixMillis;
  finished_at_ms: UnixMillis | null;
}
