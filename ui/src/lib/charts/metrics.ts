// What each chart plots: the unit conversion from the wire's raw units to chart units (GiB, W, °C),
// the axis range and the colour. Live cards and the History page share these so a chart of the
// same metric looks the same everywhere.

import type { GpuHistory, HostHistory } from '../api/types';
import type { GpuSeries, HostSeries, Value } from '../telemetry/series';
import { windowColumns } from '../telemetry/series';

export type MetricId = 'utilization' | 'vram' | 'temperature' | 'power' | 'cpu' | 'ram';

/** uPlot's AlignedData shape: x (epoch ms) then one column per series. */
export type ChartColumns = [number[], ...Value[][]];

export interface MetricSpec {
  id: MetricId;
  label: string;
  unit: string;
  color: string;
  /** Raw wire value → chart value. */
  convert: (raw: number) => number;
  /** Fixed axis maximum in chart units (100 for percentages), or a floor for an automatic maximum. */
  yMax: (ctx: { total: number | null }) => { max: number; fixed: boolean };
  decimals: number;
}

const GIB = 1024 ** 3;

export const METRICS: Record<MetricId, MetricSpec> = {
  utilization: {
    id: 'utilization', label: 'Utilization', unit: '%', color: '#4ea1ff', decimals: 0,
    convert: (v) => v,
    yMax: () => ({ max: 100, fixed: true }),
  },
  vram: {
    id: 'vram', label: 'VRAM used', unit: 'GiB', color: '#a371f7', decimals: 1,
    convert: (v) => v / GIB,
    // The card's total is the natural ceiling: a line near the top means the card is full.
    yMax: ({ total }) => (total ? { max: total / GIB, fixed: true } : { max: 1, fixed: false }),
  },
  temperature: {
    id: 'temperature', label: 'Temperature', unit: '°C', color: '#f0883e', decimals: 0,
    convert: (v) => v / 1000,
    yMax: () => ({ max: 90, fixed: false }),
  },
  power: {
    id: 'power', label: 'Power', unit: 'W', color: '#3fb950', decimals: 0,
    convert: (v) => v / 1000,
    yMax: ({ total }) => ({ max: total ? total / 1000 : 100, fixed: false }),
  },
  cpu: {
    id: 'cpu', label: 'CPU', unit: '%', color: '#4ea1ff', decimals: 0,
    convert: (v) => v,
    yMax: () => ({ max: 100, fixed: true }),
  },
  ram: {
    id: 'ram', label: 'RAM used', unit: 'GiB', color: '#a371f7', decimals: 1,
    convert: (v) => v / GIB,
    yMax: ({ total }) => (total ? { max: total / GIB, fixed: true } : { max: 1, fixed: false }),
  },
};

export function convertColumn(values: readonly Value[], spec: MetricSpec): Value[] {
  return values.map((v) => (v == null ? null : spec.convert(v)));
}

const LIVE_COLUMN: Record<'utilization' | 'vram' | 'temperature' | 'power', keyof GpuSeries> = {
  utilization: 'utilization',
  vram: 'vramUsed',
  temperature: 'temperature',
  power: 'power',
};

/** One GPU metric from the live buffer, limited to the last `windowMs` before `end`. */
export function liveGpuColumns(s: GpuSeries, metric: keyof typeof LIVE_COLUMN, windowMs: number, end: number): ChartColumns {
  const [t, col] = windowColumns(s.t, [s[LIVE_COLUMN[metric]] as Value[]], windowMs, end);
  return [t, convertColumn(col ?? [], METRICS[metric])];
}

export function liveHostColumns(s: HostSeries, metric: 'cpu' | 'ram', windowMs: number, end: number): ChartColumns {
  const [t, col] = windowColumns(s.t, [metric === 'cpu' ? s.cpu : s.ramUsed], windowMs, end);
  return [t, convertColumn(col ?? [], METRICS[metric])];
}

const HISTORY_COLUMN: Record<'utilization' | 'vram' | 'temperature' | 'power', keyof GpuHistory> = {
  utilization: 'utilization_gpu_pct',
  vram: 'memory_used_bytes',
  temperature: 'temperature_mc',
  power: 'power_mw',
};

export function historyGpuColumns(h: GpuHistory, metric: keyof typeof HISTORY_COLUMN): ChartColumns {
  return [h.t.slice(), convertColumn(h[HISTORY_COLUMN[metric]] as Value[], METRICS[metric])];
}

export function historyHostColumns(h: HostHistory, metric: 'cpu' | 'ram'): ChartColumns {
  return [h.t.slice(), convertColumn(metric === 'cpu' ? h.cpu_usage_pct : h.memory_used_bytes, METRICS[metric])];
}

/** Last non-null value of a column, for the number shown beside a chart's title. */
export function lastValue(col: readonly Value[] | undefined): number | null {
  if (!col) return null;
  for (let i = col.length - 1; i >= 0; i--) {
    const v = col[i];
    if (v != null) return v;
  }
  return null;
}
