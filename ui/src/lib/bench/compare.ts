// Comparing picked runs from their list entries: one row per point (same shape, depth and load)
// that two or more of them measured, each run's medians side by side with the ratio to the first
// picked run (the baseline). Speed benchmarks, quality probes and llama-bench runs are compared
// apart (KLD runs too: lib/quality/compare): a probe has no points (its pass rates are set side by side by compareProbes,
// lib/bench/quality), llama-bench has tests (compareTests, lib/bench/llamaBench).

import { isKld, isLlamaBench, isQuality, pointKey, pointLabel } from './format';
import type { Point, RunSummary, StepDigest } from './types';

export interface CompareCell {
  aggregate: number | null;
  stream: number | null;
  ttft: number | null;
  failed: number;
  /** To the baseline's figure at the same point; null for the baseline itself or without one. */
  aggregateRatio: number | null;
  streamRatio: number | null;
  ttftRatio: number | null;
}

export interface CompareRow {
  key: string;
  label: string;
  point: Point;
  /** One per run, in pick order; null where the run did not measure the point. */
  cells: (CompareCell | null)[];
}

export interface Comparison {
  rows: CompareRow[];
  /** Points only one of the runs measured (left out of the rows). */
  unmatched: number;
}

/** The picked runs by kind, each in pick order. */
export function splitPicks(runs: readonly RunSummary[]): { speed: RunSummary[]; quality: RunSummary[]; llamaBench: RunSummary[]; kld: RunSummary[] } {
  return {
    speed: runs.filter((r) => !isQuality(r) && !isLlamaBench(r) && !isKld(r)),
    quality: runs.filter((r) => isQuality(r)),
    llamaBench: runs.filter((r) => isLlamaBench(r)),
    kld: runs.filter((r) => isKld(r)),
  };
}

/** The runs the others are compared to: the first picked of each kind that has two or more picked. */
export function compareBases(picked: readonly RunSummary[]): Set<number> {
  const { speed, quality, llamaBench, kld } = splitPicks(picked);
  return new Set([speed, quality, llamaBench, kld].filter((list) => list.length >= 2).map((list) => list[0]!.id));
}

function ratio(v: number | null, base: number | null): number | null {
  if (v == null || base == null || !Number.isFinite(v) || !Number.isFinite(base) || base === 0) return null;
  return v / base;
}

/** The rows, in the order the runs measured their points (the baseline's first). Give it speed
 *  benchmarks (splitPicks): a quality probe has no steps, so it would only add empty columns. */
export function compareRuns(runs: readonly RunSummary[]): Comparison {
  const order: { key: string; point: Point }[] = [];
  const byRun = runs.map((r) => {
    const m = new Map<string, StepDigest>();
    for (const s of r.steps) {
      const key = pointKey(s.point);
      if (!m.has(key)) m.set(key, s);
      if (!order.some((o) => o.key === key)) order.push({ key, point: s.point });
    }
    return m;
  });
  const rows: CompareRow[] = [];
  let unmatched = 0;
  for (const { key, point } of order) {
    const steps = byRun.map((m) => m.get(key) ?? null);
    if (steps.filter((s) => s != null).length < 2) {
      unmatched++;
      continue;
    }
    const base = steps[0] ?? null;
    rows.push({
      key,
      label: pointLabel(point),
      point,
      cells: steps.map((s, i) =>
        s == null
          ? null
          : {
              aggregate: s.aggregate_tps,
              stream: s.stream_tps,
              ttft: s.ttft_ms,
              failed: s.failed_requests,
              aggregateRatio: i === 0 ? null : ratio(s.aggregate_tps, base?.aggregate_tps ?? null),
              streamRatio: i === 0 ? null : ratio(s.stream_tps, base?.stream_tps ?? null),
              ttftRatio: i === 0 ? null : ratio(s.ttft_ms, base?.ttft_ms ?? null),
            },
      ),
    });
  }
  return { rows, unmatched };
}
