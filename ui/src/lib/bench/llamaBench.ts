// A llama-bench run on the Benchmarks page: its tests' figures (median tok/s with p10–p90, mean ±
// stdev, CV over the repetitions), tok/s against context depth per pp and tg size, a box of each
// test's repetitions, what it ran on (build, backends, CPU, GPU: llama-bench reports them with
// every test, the first test's speak for all), the command line and the profile flags llama-bench
// left out, and picked llama-bench runs compared test by test.

import { boxStats, type StepBox } from './boxplot';
import { formatTps } from './format';
import { SERIES_COLORS } from '../gateway/usage';
import type { LlamaBenchSpec, LlamaBenchTest, RunSummary } from './types';
import type { XYData, XYSeries } from './series';

/** Prompt processing, token generation, or both in one test (llama-bench's `-pg`). */
export type TestKind = 'pp' | 'tg' | 'pg';

export function testKind(t: Pick<LlamaBenchTest, 'n_prompt' | 'n_gen'>): TestKind {
  if (t.n_gen === 0) return 'pp';
  if (t.n_prompt === 0) return 'tg';
  return 'pg';
}

/** The test's size without its depth: "pp512", "tg128", "pp512+tg128". */
export function sizeLabel(t: Pick<LlamaBenchTest, 'n_prompt' | 'n_gen'>): string {
  switch (testKind(t)) {
    case 'pp':
      return `pp${t.n_prompt}`;
    case 'tg':
      return `tg${t.n_gen}`;
    case 'pg':
      return `pp${t.n_prompt}+tg${t.n_gen}`;
  }
}

export interface TestFigures {
  reps: number;
  /** Median tok/s over the repetitions (llama-bench's mean without the project's statistics). */
  median: number;
  p10: number | null;
  p90: number | null;
  mean: number;
  stdev: number;
  cv: number | null;
}

/** A test's figures: the project's statistics of its repetitions where the daemon figured them,
 *  llama-bench's own mean and stdev beside. */
export function testFigures(t: LlamaBenchTest): TestFigures {
  const s = t.stats;
  return {
    reps: t.samples_ts.length,
    median: s?.median ?? t.avg_ts,
    p10: s?.p10 ?? null,
    p90: s?.p90 ?? null,
    mean: t.avg_ts,
    stdev: t.stddev_ts,
    cv: s?.cv ?? (t.avg_ts > 0 ? t.stddev_ts / t.avg_ts : null),
  };
}

/** "1234 ± 12": llama-bench's mean and stdev. */
export function meanStdevText(t: LlamaBenchTest): string {
  return `${formatTps(t.avg_ts)} ± ${formatTps(t.stddev_ts)}`;
}

export const KIND_TITLES: Record<TestKind, string> = {
  pp: 'Prompt processing (pp)',
  tg: 'Generation (tg)',
  pg: 'Prompt and generation (pp+tg)',
};

/** The kinds present, in pp, tg, pp+tg order. */
export function kindsOf(tests: readonly LlamaBenchTest[]): TestKind[] {
  return (['pp', 'tg', 'pg'] as const).filter((k) => tests.some((t) => testKind(t) === k));
}

/** Median tok/s of one kind's tests against the depth, a line per size; null with fewer than two
 *  depths (nothing to draw a line of). */
export function testsAgainstDepth(tests: readonly LlamaBenchTest[], kind: TestKind): XYData | null {
  const mine = tests.filter((t) => testKind(t) === kind);
  const x = [...new Set(mine.map((t) => t.n_depth))].sort((a, b) => a - b);
  if (x.length < 2) return null;
  const sizes = [...new Set(mine.map(sizeLabel))];
  const series: XYSeries[] = sizes.map((size, i) => ({
    label: size,
    color: SERIES_COLORS[i % SERIES_COLORS.length]!,
    values: x.map((depth) => {
      const t = mine.find((m) => sizeLabel(m) === size && m.n_depth === depth);
      return t ? testFigures(t).median : null;
    }),
  }));
  return { x, series };
}

/** A box of each test's repetitions, one kind's tests (pp and tg speeds differ by orders of
 *  magnitude, so they get a plot each). */
export function testBoxes(tests: readonly LlamaBenchTest[], kind: TestKind): StepBox[] {
  return tests
    .filter((t) => testKind(t) === kind)
    .map((t, i) => ({ index: i, label: t.test, box: boxStats(t.samples_ts), cold: null }));
}

function present(v: string | null | undefined): v is string {
  return v != null && v.trim() !== '';
}

/** What llama-bench ran on, from the first test: "build 0c1e570 (6123) · CPU · AMD Ryzen 9 ·
 *  NVIDIA RTX 5060 Ti" (a build number of 0 means a build made outside git: left out); null
 *  without a test. */
export function buildLine(tests: readonly LlamaBenchTest[]): string | null {
  const t = tests[0];
  if (!t) return null;
  const number = t.build_number != null && t.build_number > 0 ? ` (${t.build_number})` : '';
  const build = present(t.build_commit) ? `build ${t.build_commit}${number}` : null;
  const parts = [build, t.backends, t.cpu_info, t.gpu_info].filter(present);
  return parts.length > 0 ? parts.join(' · ') : null;
}

/** The model and settings llama-bench reports, from the first test: "llama 8B Q4_K - Medium, 8
 *  threads, 99 GPU layers, batch 2048 / ubatch 512, KV f16/f16, flash attention on" (a tensor
 *  split of zeros, llama-bench's "none", is left out). */
export function settingsLine(tests: readonly LlamaBenchTest[]): string | null {
  const t = tests[0];
  if (!t) return null;
  const parts = [
    present(t.model_type) ? t.model_type : null,
    t.n_threads != null ? `${t.n_threads} thread${t.n_threads === 1 ? '' : 's'}` : null,
    t.n_gpu_layers != null ? `${t.n_gpu_layers} GPU layers` : null,
    t.n_batch != null || t.n_ubatch != null ? `batch ${t.n_batch ?? '?'} / ubatch ${t.n_ubatch ?? '?'}` : null,
    present(t.type_k) || present(t.type_v) ? `KV ${t.type_k ?? '?'}/${t.type_v ?? '?'}` : null,
    present(t.flash_attn) ? `flash attention ${t.flash_attn}` : null,
    present(t.tensor_split) && !/^[0./\s]+$/.test(t.tensor_split) ? `tensor split ${t.tensor_split}` : null,
    present(t.tensor_buft_overrides) && t.tensor_buft_overrides !== 'none' ? `overrides ${t.tensor_buft_overrides}` : null,
  ].filter(present);
  return parts.length > 0 ? parts.join(', ') : null;
}

/** The llama-bench command line and the profile flags it left out (`-c 2048`), from the run's
 *  context. */
export function llamaBenchContext(context: Record<string, unknown>): { commandLine: string | null; dropped: string[] } {
  const lb = context.llama_bench;
  if (!lb || typeof lb !== 'object') return { commandLine: null, dropped: [] };
  const o = lb as Record<string, unknown>;
  const commandLine = typeof o.command_line === 'string' && o.command_line.trim() !== '' ? o.command_line : null;
  const dropped = Array.isArray(o.dropped) ? o.dropped.filter((d): d is string => typeof d === 'string') : [];
  return { commandLine, dropped };
}

/** The runs list's headline for a llama-bench run (its list entry has no tests): its sizes,
 *  "pp512 · tg128 @ d0, 4096". */
export function specHeadline(s: LlamaBenchSpec): string {
  const pp = (s.prompt_tokens ?? [512]).map((n) => `pp${n}`);
  const tg = (s.gen_tokens ?? [128]).map((n) => `tg${n}`);
  return `${[...pp, ...tg].join(' · ')} @ d${(s.depths ?? [0]).join(', ')}`;
}

// ---- Picked llama-bench runs side by side ----

export interface TestCell {
  median: number;
  cv: number | null;
  /** To the base's median at the same test; null for the base or without one. */
  ratio: number | null;
}

export interface TestCompareRow {
  /** The test's label: "pp512 @ d0". */
  test: string;
  /** One per run, in pick order; null where the run has no such test. */
  cells: (TestCell | null)[];
}

/** The picked runs' tests by label, each run's median tok/s with the ratio to the first picked
 *  run (the base); tests only one run has are counted, not shown. Rows in the base's order, then
 *  the others' new ones. */
export function compareTests(runs: readonly (Pick<RunSummary, 'id'> & { tests: readonly LlamaBenchTest[] })[]): { rows: TestCompareRow[]; unmatched: number } {
  const labels: string[] = [];
  for (const r of runs) for (const t of r.tests) if (!labels.includes(t.test)) labels.push(t.test);
  const rows: TestCompareRow[] = [];
  let unmatched = 0;
  for (const label of labels) {
    const found = runs.map((r) => r.tests.find((t) => t.test === label) ?? null);
    if (found.filter((t) => t != null).length < 2) {
      unmatched++;
      continue;
    }
    const base = found[0] ? testFigures(found[0]).median : null;
    rows.push({
      test: label,
      cells: found.map((t, i) => {
        if (!t) return null;
        const f = testFigures(t);
        return { median: f.median, cv: f.cv, ratio: i === 0 || base == null || base === 0 ? null : f.median / base };
      }),
    });
  }
  return { rows, unmatched };
}
