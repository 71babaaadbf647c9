// The steps table's rows: each step's warm-run summary, and its cold run's own figures (the
// medians of its requests where the run itself does not carry them) — the cold run is shown,
// never folded in. Columns no step has a figure for (acceptance without a draft model, goodput
// without latency targets, cache hits an engine does not report) are left out.

import type { RunResult, StepResult, StepSummary } from './types';

/** The cold run's figures, in the summary's terms (medians). */
export interface ColdFigures {
  aggregate_tps: number | null;
  stream_tps: number | null;
  ttft_ms: number | null;
  tpot_ms: number | null;
  e2e_ms: number | null;
  prefill_tps: number | null;
  engine_decode_tps: number | null;
  /** accepted / drafted */
  acceptance: number | null;
  cache_hit_rate: number | null;
  goodput_rps: number | null;
  failed: number;
}

/** The median of the finite values (the mean of the middle two for an even count). */
export function median(values: readonly (number | null | undefined)[]): number | null {
  const v = values.filter((x): x is number => x != null && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 === 1 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
}

export function acceptanceRate(r: Pick<RunResult, 'acceptance'>): number | null {
  const a = r.acceptance;
  if (!a) return null;
  return a.drafted > 0 ? a.accepted / a.drafted : (a.reported_rate ?? null);
}

export function coldFigures(run: RunResult): ColdFigures {
  const ok = run.requests.filter((s) => s.ok);
  return {
    aggregate_tps: run.aggregate_tps,
    stream_tps: run.stream_tps,
    ttft_ms: run.ttft_ms,
    tpot_ms: median(ok.map((s) => s.tpot_ms)),
    e2e_ms: median(ok.map((s) => s.e2e_ms)),
    prefill_tps: run.prefill_tps,
    engine_decode_tps: run.engine_decode_tps,
    acceptance: acceptanceRate(run),
    cache_hit_rate: run.cache_hit_rate,
    goodput_rps: run.goodput_rps,
    failed: run.failed,
  };
}

/** The step's cold run, when it has run. */
export function coldRun(step: StepResult): RunResult | null {
  return step.runs.find((r) => r.cold) ?? null;
}

/** Warm runs done so far. */
export function warmRuns(step: StepResult): number {
  return step.runs.filter((r) => !r.cold).length;
}

export interface OptionalColumns {
  prefill: boolean;
  engineDecode: boolean;
  acceptance: boolean;
  cacheHits: boolean;
  goodput: boolean;
  itl: boolean;
}

/** Which of the figures some step (summary or cold run) has. */
export function optionalColumns(steps: readonly StepResult[]): OptionalColumns {
  const any = (fromSummary: (s: StepSummary) => unknown, fromRun: (r: RunResult) => unknown) =>
    steps.some((st) => (st.summary != null && fromSummary(st.summary) != null) || st.runs.some((r) => fromRun(r) != null));
  return {
    prefill: any((s) => s.prefill_tps, (r) => r.prefill_tps),
    engineDecode: any((s) => s.engine_decode_tps, (r) => r.engine_decode_tps),
    acceptance: any((s) => s.acceptance, (r) => acceptanceRate(r)),
    cacheHits: any((s) => s.cache_hit_rate, (r) => r.cache_hit_rate),
    goodput: any((s) => s.goodput_rps, (r) => r.goodput_rps),
    itl: any((s) => s.itl_ms, () => null),
  };
}
