// The box plot of each step's warm runs: quartiles computed from the runs themselves (whiskers at
// min and max, the box from p25 to p75, a line at the median), the cold run kept beside it as its
// own marker — nothing discarded. Also the value axis' round tick marks.

import { pointLabel } from './format';
import type { RunResult, StepResult } from './types';

/** The `p`th quantile (0–1) of sorted, non-empty values, linear between order statistics
 *  (numpy's default, as the daemon's own percentiles). */
export function quantile(sorted: readonly number[], p: number): number {
  const rank = Math.min(1, Math.max(0, p)) * (sorted.length - 1);
  const below = Math.floor(rank);
  const above = Math.ceil(rank);
  const lo = sorted[below]!;
  return lo + (sorted[above]! - lo) * (rank - below);
}

export interface BoxStats {
  n: number;
  min: number;
  q1: number;
  median: number;
  q3: number;
  max: number;
}

/** The five numbers of the finite values, or null when there are none. */
export function boxStats(values: readonly (number | null | undefined)[]): BoxStats | null {
  const sorted = values.filter((v): v is number => v != null && Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return null;
  return {
    n: sorted.length,
    min: sorted[0]!,
    q1: quantile(sorted, 0.25),
    median: quantile(sorted, 0.5),
    q3: quantile(sorted, 0.75),
    max: sorted[sorted.length - 1]!,
  };
}

export interface StepBox {
  index: number;
  label: string;
  /** The warm runs' spread; null before the first warm run. */
  box: BoxStats | null;
  /** The cold run's value, drawn on its own. */
  cold: number | null;
}

/** One box per step of a run-level figure (aggregate tok/s by default). */
export function stepBoxes(results: readonly StepResult[], figure: (r: RunResult) => number | null = (r) => r.aggregate_tps): StepBox[] {
  return results.map((s) => {
    const cold = s.runs.find((r) => r.cold);
    return {
      index: s.index,
      label: pointLabel(s.point),
      box: boxStats(s.runs.filter((r) => !r.cold).map(figure)),
      cold: cold ? figure(cold) : null,
    };
  });
}

/** The largest value drawn (a box's max or a cold run), 0 when there is none. */
export function boxesMax(boxes: readonly StepBox[]): number {
  let max = 0;
  for (const b of boxes) {
    if (b.box) max = Math.max(max, b.box.max);
    if (b.cold != null && Number.isFinite(b.cold)) max = Math.max(max, b.cold);
  }
  return max;
}

/** Round tick values from 0 up past `max`, about `count` of them: 0, 20, 40, … */
export function niceTicks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? 10 * magnitude;
  const ticks: number[] = [];
  for (let v = 0; v < max + step - 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}
