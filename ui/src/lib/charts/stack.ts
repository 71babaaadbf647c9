// Stacked bar charts with uPlot: each series' column becomes the running total of it and the
// series below it, and the series are handed to uPlot top first, so the tallest bar (the total)
// is drawn first and each lower series paints over its own part. Hover still reads the raw values.

import type { ChartColumns } from './metrics';

/** Running totals, bottom (first) series first: [[1,2],[3,4]] → [[1,2],[4,6]]. */
export function cumulative(columns: readonly (readonly number[])[]): number[][] {
  const out: number[][] = [];
  let below: number[] | null = null;
  for (const col of columns) {
    const next: number[] = col.map((v, i) => (below?.[i] ?? 0) + (Number.isFinite(v) ? v : 0));
    out.push(next);
    below = next;
  }
  return out;
}

/** uPlot's data for stacked bars: x, then the running totals top series first. */
export function stackedColumns(t: readonly number[], columns: readonly (readonly number[])[]): ChartColumns {
  return [t.slice(), ...cumulative(columns).reverse()];
}

/** The largest stack (the y axis' top), at least `floor`. */
export function stackMax(columns: readonly (readonly number[])[], floor = 1): number {
  const sums = cumulative(columns).at(-1) ?? [];
  return sums.reduce((m, v) => Math.max(m, v), floor);
}
