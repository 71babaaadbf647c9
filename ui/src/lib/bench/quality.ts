// The quality probe on the Benchmarks page: pass rates with their 95 % intervals per category (in
// the probe's order), failed requests apart, what to say beside an answer (cut at max tokens, a
// failed request, no answer line), pass rates of picked probes side by side with the paired test's
// verdict, and "by target": each target's latest speed headline beside its latest pass rate, so a
// quantization or KV cache type that costs accuracy shows next to what it buys in speed.

import { formatPassRate, headline, isQuality, targetLabel } from './format';
import type { Answer, Point, ProbeComparison, QualitySummary, RateInterval, RunSummary } from './types';

/** The probe's categories in the order it asks them (crates/bench quality/items.rs); others after. */
export const CATEGORY_ORDER = ['arithmetic', 'units', 'dates', 'strings', 'code'];

export interface CategoryRow {
  category: string;
  passed: number;
  /** Questions of the category graded (failed requests left out). */
  total: number;
  /** passed / total, 0–1; null when none was graded. */
  rate: number | null;
  /** The rate's 95 % interval. */
  interval: RateInterval | null;
  /** Failed requests of the category. */
  errors: number;
}

/** A 95 % interval as percentages: "31–86 %"; "—" without one. */
export function formatInterval(i: RateInterval | null | undefined): string {
  if (!i) return '—';
  return `${Math.round(i.low * 100)}–${Math.round(i.high * 100)} %`;
}

/** A pass rate with its interval: "62 % (95 % interval 31–86 %)", as the CLI writes it. */
export function rateWithInterval(rate: number | null | undefined, interval: RateInterval | null | undefined): string {
  if (rate == null) return '—';
  return interval ? `${formatPassRate(rate)} (95 % interval ${formatInterval(interval)})` : formatPassRate(rate);
}

function rate(passed: number, total: number): number | null {
  return total > 0 ? passed / total : null;
}

function categoryRank(c: string): number {
  const i = CATEGORY_ORDER.indexOf(c);
  return i < 0 ? CATEGORY_ORDER.length : i;
}

/** The categories' pass counts, in the probe's order (unknown ones after, by name). */
export function categoryRows(q: QualitySummary | null | undefined): CategoryRow[] {
  if (!q) return [];
  return Object.entries(q.by_category)
    .map(([category, [passed, total]]) => ({
      category,
      passed,
      total,
      rate: rate(passed, total),
      interval: q.category_intervals?.[category] ?? null,
      errors: q.category_errors?.[category] ?? 0,
    }))
    .sort((a, b) => categoryRank(a.category) - categoryRank(b.category) || a.category.localeCompare(b.category));
}

/** What to say beside an answer: why it has no answer line, or that its request failed. */
export function answerNotes(a: Answer): string[] {
  const notes: string[] = [];
  if (a.error) notes.push(`request failed, not graded: ${a.error}`);
  if (a.truncated) notes.push('cut at max tokens before answering');
  else if (!a.error && a.got == null) notes.push('no answer line');
  return notes;
}

/** An answer line short enough for a table cell: a model that never wrote `Answer:` is graded on
 *  its last line, which can be a paragraph. The whole line stays in the cell's title. */
export function shortAnswer(got: string, max = 60): string {
  const one = got.replace(/\s+/g, ' ').trim();
  return one.length <= max ? one : `${one.slice(0, max - 1).trimEnd()}…`;
}

/** Answers cut short, and failed requests (not graded): a probe with many of either says little
 *  about accuracy. */
export function answerTrouble(answers: readonly Answer[]): { truncated: number; errors: number } {
  return { truncated: answers.filter((a) => a.truncated).length, errors: answers.filter((a) => a.error != null).length };
}

/** A difference of pass rates in percentage points: 0.24 − 0.52 → "−28 pts". */
export function formatPoints(diff: number | null | undefined): string {
  if (diff == null || !Number.isFinite(diff)) return '—';
  const pts = Math.round(diff * 100);
  if (pts === 0) return '±0 pts';
  return `${pts > 0 ? '+' : '−'}${Math.abs(pts)} pts`;
}

// ---- Picked probes side by side ----

export interface ProbeCell {
  passed: number;
  total: number;
  rate: number | null;
  interval: RateInterval | null;
  /** To the first picked probe's rate; null for that one or without one. */
  diff: number | null;
}

export interface ProbeCompareRow {
  /** `overall` or a category. */
  key: string;
  label: string;
  /** One per probe, in pick order; null where the probe has no answer of the category. */
  cells: (ProbeCell | null)[];
}

/** The picked probes' pass rates, overall and per category, each against the first (the base). */
export function compareProbes(runs: readonly RunSummary[]): ProbeCompareRow[] {
  const probes = runs.filter(isQuality);
  if (probes.length === 0) return [];
  const categories = [...new Set(probes.flatMap((r) => categoryRows(r.quality).map((c) => c.category)))].sort(
    (a, b) => categoryRank(a) - categoryRank(b) || a.localeCompare(b),
  );
  type Counts = [number, number, RateInterval | null];
  const cellsOf = (get: (q: QualitySummary) => Counts | null): (ProbeCell | null)[] => {
    const raw = probes.map((r) => (r.quality ? get(r.quality) : null));
    const baseRate = raw[0] ? rate(raw[0][0], raw[0][1]) : null;
    return raw.map((counts, i) => {
      if (!counts) return null;
      const r = rate(counts[0], counts[1]);
      return { passed: counts[0], total: counts[1], rate: r, interval: counts[2], diff: i === 0 || r == null || baseRate == null ? null : r - baseRate };
    });
  };
  const category = (q: QualitySummary, c: string): Counts | null => {
    const counts = q.by_category[c];
    return counts ? [counts[0], counts[1], q.category_intervals?.[c] ?? null] : null;
  };
  return [
    { key: 'overall', label: 'All questions', cells: cellsOf((q) => (q.graded > 0 ? [q.passed, q.graded, q.interval] : null)) },
    ...categories.map((c) => ({ key: c, label: c, cells: cellsOf((q) => category(q, c)) })),
  ];
}

// ---- The paired test ----

/** "p = 0.021", "p < 0.001", as the CLI writes it. */
export function formatP(p: number): string {
  if (p < 0.001) return 'p < 0.001';
  return `p = ${p.toFixed(3).replace(/0+$/, '').replace(/\.$/, '')}`;
}

/** The paired test's verdict in words: "#4 better (p = 0.021)" or "not distinguishable (p = 0.38)". */
export function verdictText(c: ProbeComparison, base: string, other: string): string {
  const p = formatP(c.p_value);
  if (c.verdict === 'base_better') return `${base} better (${p})`;
  if (c.verdict === 'other_better') return `${other} better (${p})`;
  return `not distinguishable (${p})`;
}

/** The discordant counts in words: "only #1 passed 9, only #4 passed 1, of 35 shared". */
export function discordantText(c: ProbeComparison, base: string, other: string): string {
  return `only ${base} passed ${c.base_only}, only ${other} passed ${c.other_only}, of ${c.shared} shared`;
}

// ---- By target ----

export interface TargetRow {
  /** The target in a few words (targetLabel). */
  label: string;
  /** The latest finished speed benchmark against it: its first step's medians. */
  speed: { id: number; point: Point; aggregate: number | null; stream: number | null; at: number } | null;
  /** The latest finished quality probe against it. */
  quality: { id: number; passed: number; answered: number; rate: number | null; interval: RateInterval | null; at: number } | null;
}

/** Per target, the latest done speed run's headline beside the latest done probe's pass rate;
 *  targets by name. Runs that did not finish (running, failed, cancelled) are left out. */
export function byTarget(runs: readonly RunSummary[]): TargetRow[] {
  const rows = new Map<string, TargetRow>();
  const newer = (at: number, than: { at: number } | null) => than == null || at > than.at;
  for (const r of runs) {
    if (r.status !== 'done') continue;
    const label = targetLabel(r.target);
    const row = rows.get(label) ?? { label, speed: null, quality: null };
    rows.set(label, row);
    const at = r.finished_at_ms ?? r.started_at_ms;
    if (isQuality(r)) {
      const q = r.quality;
      if (q && q.graded > 0 && newer(at, row.quality)) row.quality = { id: r.id, passed: q.passed, answered: q.graded, rate: q.pass_rate, interval: q.interval, at };
    } else {
      const h = headline(r);
      if (h && newer(at, row.speed)) row.speed = { id: r.id, point: h.point, aggregate: h.aggregate, stream: h.stream, at };
    }
  }
  return [...rows.values()].filter((r) => r.speed != null || r.quality != null).sort((a, b) => a.label.localeCompare(b.label));
}
