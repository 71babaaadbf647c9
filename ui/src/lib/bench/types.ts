// The benchmarks API's shapes (/api/v1/bench, crates/bench): what a benchmark does (BenchSpec for
// a speed benchmark, ProbeSpec for a quality probe), what it is pointed at (Target), a run as
// lists show it (RunSummary, also the `bench.run` event's data) and in full (RunDetail: context,
// telemetry, every run of every step, or every answer of a probe).

import type { UnixMillis } from '../api/types';

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

/** A quality probe: questions with one exact answer each, asked at temperature 0. Every field
 *  optional on input (the daemon's defaults: 2048, 4, 600). */
export interface ProbeSpec {
  /** Room per reply for reasoning before the answer line. */
  max_tokens?: number;
  /** Questions asked at once. */
  concurrency?: number;
  request_timeout_s?: number;
}

/** `serving`: a speed benchmark; `quality`: a quality probe. */
export type RunKind = 'serving' | 'quality';

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

/** POST /bench/runs. */
export type NewBenchmark = NewSpeedRun | NewQualityProbe;

/** A quality probe's pass counts: overall, and `[passed, asked]` per category. */
export interface QualitySummary {
  /** Questions in the probe. */
  total: number;
  /** Questions answered so far (a reply came back, whatever it said, or failed). */
  answered: number;
  passed: number;
  /** passed / answered, 0–1; null before any answer. */
  pass_rate: number | null;
  /** Answers that are a failed request. */
  errors: number;
  by_category: Record<string, [number, number]>;
}

/** One question of a quality probe and what the model answered. */
export interface Answer {
  id: string;
  category: string;
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
  /** By kind: a BenchSpec (serving) or a ProbeSpec (quality); read it through `speedSpec` or
   *  `probeSpec` (lib/bench/format). */
  spec: BenchSpec | ProbeSpec;
  status: RunStatus | (string & {});
  error: string | null;
  /** False: prompt lengths were estimated, not counted by the engine's tokenizer. */
  exact_prompts: boolean;
  started_at_ms: UnixMillis;
  finished_at_ms: UnixMillis | null;
  /** A speed benchmark's steps; empty for a quality probe. */
  steps: StepDigest[];
  /** Runs (serving) or questions answered (quality), of all. */
  runs_done: number;
  runs_total: number;
  /** A quality probe's pass counts; null for a speed benchmark. */
  quality?: QualitySummary | null;
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
}

/** GET /bench/runs/{id}/export?format=… */
export type ExportFormat = 'csv' | 'json' | 'md';
