// Benchmark answers for the store and shaping tests: runs as listed and in full, steps, runs,
// requests, summary figures and telemetry, and quality probes with their answers, as the daemon
// sends them.

import type {
  Answer,
  Point,
  QualitySummary,
  RateInterval,
  RunDetail,
  RunResult,
  RunSummary,
  Sample,
  Stats,
  StepDigest,
  StepResult,
  StepSummary,
  TelemetryPoint,
} from '../lib/bench/types';

export const T0 = 1_764_000_000_000;

export function point(prompt: number, output: number, depth = 0, load: Point['load'] = { concurrency: 1 }): Point {
  return { shape: { prompt_tokens: prompt, output_tokens: output }, depth, load };
}

/** Stats of these values, figured the way the daemon figures them (numpy's percentiles). */
export function stats(values: number[]): Stats {
  const v = [...values].sort((a, b) => a - b);
  const n = v.length;
  const pct = (p: number) => {
    const rank = (p / 100) * (n - 1);
    const lo = Math.floor(rank);
    const hi = Math.ceil(rank);
    return v[lo]! + (v[hi]! - v[lo]!) * (rank - lo);
  };
  const mean = v.reduce((a, x) => a + x, 0) / n;
  const stdev = n > 1 ? Math.sqrt(v.reduce((a, x) => a + (x - mean) ** 2, 0) / (n - 1)) : 0;
  return { n, mean, median: pct(50), p10: pct(10), p90: pct(90), p99: pct(99), min: v[0]!, max: v[n - 1]!, stdev, cv: mean === 0 ? 0 : stdev / mean };
}

export function digest(p: Point, extra: Partial<StepDigest> = {}): StepDigest {
  return { point: p, runs: 11, complete: true, aggregate_tps: 40, stream_tps: 40, ttft_ms: 120, failed_requests: 0, ...extra };
}

export function summary(id: number, extra: Partial<RunSummary> = {}): RunSummary {
  return {
    id,
    name: `run ${id}`,
    kind: 'serving',
    target: { kind: 'instance', name: 'qwen' },
    spec: { warm_runs: 10 },
    status: 'done',
    error: null,
    exact_prompts: true,
    started_at_ms: T0 + id * 60_000,
    finished_at_ms: T0 + id * 60_000 + 30_000,
    steps: [digest(point(256, 512))],
    runs_done: 11,
    runs_total: 11,
    quality: null,
    ...extra,
  };
}

export function sample(extra: Partial<Sample> = {}): Sample {
  return {
    offset_ms: 0,
    ok: true,
    ttft_ms: 100,
    e2e_ms: 5200,
    tpot_ms: 10,
    prompt_tokens: 256,
    output_tokens: 512,
    cached_tokens: null,
    output_counted: false,
    chunks: 512,
    engine_decode_tps: null,
    engine_prompt_tps: null,
    draft_tokens: null,
    draft_accepted: null,
    ...extra,
  };
}

export function runResult(index: number, aggregate: number | null, extra: Partial<RunResult> = {}): RunResult {
  return {
    index,
    cold: index === 0,
    wall_ms: 5300,
    ok: 1,
    failed: 0,
    prompt_tokens: 256,
    output_tokens: 512,
    aggregate_tps: aggregate,
    total_tps: null,
    stream_tps: aggregate,
    ttft_ms: 100,
    prefill_tps: 2560,
    engine_decode_tps: null,
    acceptance: null,
    cache_hit_rate: null,
    goodput_rps: null,
    request_rps: 0.19,
    requests: [sample()],
    ...extra,
  };
}

export function stepSummary(extra: Partial<StepSummary> = {}): StepSummary {
  return {
    runs: 3,
    failed_requests: 0,
    aggregate_tps: stats([40, 41, 42]),
    stream_tps: stats([40, 41, 42]),
    ttft_ms: stats([100, 110, 130]),
    tpot_ms: stats([10, 10, 11]),
    e2e_ms: stats([5200, 5300, 5400]),
    itl_ms: null,
    prefill_tps: stats([2500, 2560, 2600]),
    engine_decode_tps: null,
    prompt_tokens: stats([256, 256, 256]),
    output_tokens: stats([512, 512, 512]),
    acceptance: null,
    acceptance_length: null,
    runs_below_acceptance: null,
    cache_hit_rate: null,
    goodput_rps: null,
    ...extra,
  };
}

/** A step with a cold run and warm runs of these aggregate tok/s. */
export function step(index: number, p: Point, cold: number | null, warm: number[], extra: Partial<StepResult> = {}): StepResult {
  const runs = [...(cold == null ? [] : [runResult(0, cold)]), ...warm.map((v, i) => runResult(i + 1, v))];
  return { index, point: p, runs, summary: warm.length > 0 ? stepSummary({ runs: warm.length, aggregate_tps: stats(warm) }) : null, complete: true, ...extra };
}

export function telemetryPoint(t_ms: number, gpus: { index: number; util?: number; temp?: number; clock?: number; power?: number }[]): TelemetryPoint {
  return {
    t_ms,
    gpus: gpus.map((g) => ({
      index: g.index,
      name: 'NVIDIA GeForce RTX 3090',
      util_pct: g.util ?? null,
      temp_c: g.temp ?? null,
      sm_clock_mhz: g.clock ?? null,
      power_w: g.power ?? null,
      mem_used_bytes: null,
    })),
    cpu_util_pct: 12,
  };
}

export function detail(id: number, extra: Partial<RunDetail> = {}): RunDetail {
  return {
    ...summary(id),
    context: { target: { kind: 'instance', name: 'qwen' }, command_line: 'llama-server -m /m/qwen.gguf --port 8080' },
    telemetry: [],
    results: [step(0, point(256, 512), 30, [40, 41, 42])],
    answers: [],
    ...extra,
  };
}

/** The probe's categories, in its order (crates/bench quality/items.rs), six questions each. */
export const PROBE_CATEGORIES: [string, number][] = [
  ['arithmetic', 6],
  ['units', 6],
  ['dates', 6],
  ['strings', 6],
  ['code', 6],
];

/** An answer as the daemon stores it; passed unless told otherwise. */
export function answer(id: string, category: string, extra: Partial<Answer> = {}): Answer {
  return {
    id,
    category,
    expected: '42',
    got: '42',
    pass: true,
    reply_tail: 'Six times seven.\nAnswer: 42',
    output_tokens: 120,
    truncated: false,
    error: null,
    duration_ms: 1500,
    ...extra,
  };
}

/** A probe's answers: every question of each category, the first `passed[category]` passing. */
export function probeAnswers(passed: Record<string, number>, answered = 30): Answer[] {
  const all: Answer[] = [];
  for (const [category, n] of PROBE_CATEGORIES) {
    for (let i = 0; i < n; i++) {
      const ok = i < (passed[category] ?? 0);
      all.push(answer(`${category}-${i + 1}`, category, ok ? {} : { got: '7', pass: false }));
    }
  }
  return all.slice(0, answered);
}

/** The Wilson interval the daemon sends (crates/bench quality/significance.rs). */
export function wilsonOf(passed: number, total: number): RateInterval | null {
  if (total === 0) return null;
  const z = 1.959963984540054;
  const p = passed / total;
  const centre = (p + (z * z) / (2 * total)) / (1 + (z * z) / total);
  const half = (z / (1 + (z * z) / total)) * Math.sqrt((p * (1 - p)) / total + (z * z) / (4 * total * total));
  return { low: Math.max(0, centre - half), high: Math.min(1, centre + half) };
}

/** Pass counts of these answers, as the daemon figures them (ProbeSummary::of): failed requests
 *  apart, rates of the graded answers. */
export function qualityOf(answers: readonly Answer[]): QualitySummary {
  const by_category: Record<string, [number, number]> = {};
  const category_errors: Record<string, number> = {};
  for (const a of answers) {
    const c = (by_category[a.category] ??= [0, 0]);
    if (a.error != null) {
      category_errors[a.category] = (category_errors[a.category] ?? 0) + 1;
      continue;
    }
    c[1] += 1;
    if (a.pass) c[0] += 1;
  }
  const graded = answers.filter((a) => a.error == null);
  const passed = graded.filter((a) => a.pass).length;
  const category_intervals: Record<string, RateInterval> = {};
  for (const [c, [p, n]] of Object.entries(by_category)) {
    const i = wilsonOf(p, n);
    if (i) category_intervals[c] = i;
  }
  return {
    total: 30,
    answered: answers.length,
    graded: graded.length,
    passed,
    pass_rate: graded.length > 0 ? passed / graded.length : null,
    interval: wilsonOf(passed, graded.length),
    errors: answers.length - graded.length,
    by_category,
    category_intervals,
    category_errors,
  };
}

/** A quality probe as listed. */
export function probeSummary(id: number, answers: readonly Answer[] = probeAnswers({ arithmetic: 6, units: 4, dates: 5, strings: 3, code: 6 }), extra: Partial<RunSummary> = {}): RunSummary {
  return summary(id, {
    kind: 'quality',
    spec: { max_tokens: 2048, concurrency: 4, request_timeout_s: 600, count: 30, seed: 1 },
    exact_prompts: false,
    steps: [],
    runs_done: answers.length,
    runs_total: 30,
    quality: qualityOf(answers),
    ...extra,
  });
}

/** A quality probe in full. */
export function probeDetail(id: number, answers: Answer[] = probeAnswers({ arithmetic: 6, units: 4, dates: 5, strings: 3, code: 6 }), extra: Partial<RunDetail> = {}): RunDetail {
  return { ...detail(id), ...probeSummary(id, answers), results: [], answers, ...extra };
}
