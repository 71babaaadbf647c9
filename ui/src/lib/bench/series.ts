// The run charts' data: median aggregate and per-stream tok/s against the load (streams or
// req/s), the context depth or the prompt length, one pair of lines per group of steps that share
// the other coordinates; TTFT and E2E percentiles per step; and the compare overlay (each picked
// run's tok/s against concurrency). Columns are aligned on a sorted x, null where a line has no point.

import { SERIES_COLORS } from '../gateway/usage';
import { isRate, loadLabel, loadValue, pointLabel, shapeLabel } from './format';
import type { Point, RunSummary, StepDigest, StepResult, Stats } from './types';

export interface XYSeries {
  label: string;
  color: string;
  values: (number | null)[];
  /** Dashed (per-stream lines, high percentiles). */
  dashed?: boolean;
}

export interface XYData {
  x: number[];
  series: XYSeries[];
}

/** What the throughput is drawn against. */
export type ThroughputAxis = 'load' | 'depth' | 'prompt';

/** The x value and the group (the other coordinates) of a step for an axis. */
function placeOf(p: Point, axis: ThroughputAxis): { x: number; group: string } {
  const depth = p.depth > 0 ? ` @ depth ${p.depth}` : '';
  switch (axis) {
    case 'load':
      return { x: loadValue(p.load), group: `${shapeLabel(p.shape)}${depth}` };
    case 'depth':
      return { x: p.depth, group: `${shapeLabel(p.shape)}, ${loadLabel(p.load)}` };
    case 'prompt':
      return { x: p.shape.prompt_tokens, group: `→${p.shape.output_tokens}${depth}, ${loadLabel(p.load)}` };
  }
}

/** The axis' title: "Streams", "Requests per second", "Context depth (tokens)", "Prompt tokens". */
export function axisTitle(axis: ThroughputAxis, steps: readonly { point: Point }[]): string {
  if (axis === 'depth') return 'Context depth (tokens)';
  if (axis === 'prompt') return 'Prompt tokens';
  return steps.some((s) => isRate(s.point.load)) ? 'Requests per second' : 'Streams';
}

function sortedUnique(values: number[]): number[] {
  return [...new Set(values)].sort((a, b) => a - b);
}

interface Line {
  label: string;
  points: Map<number, number | null>;
}

/** Lines keyed by group, each with its x → value; first seen first. */
function collect<T>(rows: readonly T[], place: (r: T) => { x: number; group: string }, value: (r: T) => number | null): Map<string, Line> {
  const lines = new Map<string, Line>();
  for (const r of rows) {
    const { x, group } = place(r);
    let line = lines.get(group);
    if (!line) lines.set(group, (line = { label: group, points: new Map() }));
    line.points.set(x, value(r));
  }
  return lines;
}

function column(line: Line, x: number[]): (number | null)[] {
  return x.map((v) => line.points.get(v) ?? null);
}

/** Aggregate (solid) and per-stream (dashed) median tok/s against an axis, a pair of lines per
 *  group; null when the run has fewer than two values on that axis (nothing to draw a line of). */
export function throughputAgainst(steps: readonly StepDigest[], axis: ThroughputAxis): XYData | null {
  const x = sortedUnique(steps.map((s) => placeOf(s.point, axis).x));
  if (x.length < 2) return null;
  const aggregate = collect(steps, (s) => placeOf(s.point, axis), (s) => s.aggregate_tps);
  const stream = collect(steps, (s) => placeOf(s.point, axis), (s) => s.stream_tps);
  const single = aggregate.size === 1;
  const series: XYSeries[] = [];
  [...aggregate.keys()].forEach((group, i) => {
    const color = SERIES_COLORS[i % SERIES_COLORS.length]!;
    const name = single ? '' : `${group} · `;
    series.push({ label: `${name}aggregate`, color, values: column(aggregate.get(group)!, x) });
    series.push({ label: `${name}per stream`, color, values: column(stream.get(group)!, x), dashed: true });
  });
  return { x, series };
}

export type LatencyFigure = 'ttft_ms' | 'e2e_ms';

const PERCENTILES: { key: keyof Stats; label: string; dashed: boolean }[] = [
  { key: 'median', label: 'median', dashed: false },
  { key: 'p90', label: 'p90', dashed: true },
  { key: 'p99', label: 'p99', dashed: true },
];

/** A latency's median, p90 and p99 per step (x is the step's number, from 1). */
export function latencyPerStep(results: readonly StepResult[], figure: LatencyFigure, color: string): XYData {
  const x = results.map((_, i) => i + 1);
  const alpha = ['', 'b3', '66'];
  return {
    x,
    series: PERCENTILES.map((p, i) => ({
      label: p.label,
      color: color + alpha[i],
      dashed: p.dashed,
      values: results.map((s) => s.summary?.[figure]?.[p.key] ?? null),
    })),
  };
}

/** The steps' labels by number, for a per-step chart's hover text. */
export function stepLabels(results: readonly StepResult[]): Map<number, string> {
  return new Map(results.map((s, i) => [i + 1, pointLabel(s.point)]));
}

/** The compare overlay: each run's aggregate (solid) and per-stream (dashed) median tok/s against
 *  concurrency, a colour per run (and per shape and depth when a run has several); rate-mode
 *  steps have no place on it. Null when no picked run has a concurrency step. */
export function compareAgainstConcurrency(runs: readonly RunSummary[]): XYData | null {
  const rows = runs.flatMap((run) => run.steps.filter((s) => !isRate(s.point.load)).map((step) => ({ run, step })));
  const x = sortedUnique(rows.map((row) => loadValue(row.step.point.load)));
  if (x.length === 0) return null;
  const place = (row: (typeof rows)[number]) => {
    const { group } = placeOf(row.step.point, 'load');
    const several = new Set(row.run.steps.filter((s) => !isRate(s.point.load)).map((s) => placeOf(s.point, 'load').group)).size > 1;
    return { x: loadValue(row.step.point.load), group: `#${row.run.id} ${row.run.name}${several ? ` · ${group}` : ''}` };
  };
  const aggregate = collect(rows, place, (row) => row.step.aggregate_tps);
  const stream = collect(rows, place, (row) => row.step.stream_tps);
  const series: XYSeries[] = [];
  [...aggregate.keys()].forEach((group, i) => {
    const color = SERIES_COLORS[i % SERIES_COLORS.length]!;
    series.push({ label: `${group} · aggregate`, color, values: column(aggregate.get(group)!, x) });
    series.push({ label: `${group} · per stream`, color, values: column(stream.get(group)!, x), dashed: true });
  });
  return { x, series };
}
