// The rig during a run, as charts: one line per GPU of its utilization, temperature, SM clock
// or power against seconds since the run started, so a throttling GPU shows next to the numbers.
// While the run goes on, the live stream's frames extend what the daemon stored so far.

import { SERIES_COLORS } from '../gateway/usage';
import type { TelemetryFrame } from '../api/types';
import type { XYData } from './series';
import type { TelemetryGpu, TelemetryPoint } from './types';

export type TelemetryMetric = 'util_pct' | 'temp_c' | 'sm_clock_mhz' | 'power_w';

export const TELEMETRY_METRICS: { metric: TelemetryMetric; title: string; unit: string }[] = [
  { metric: 'util_pct', title: 'GPU utilization', unit: '%' },
  { metric: 'temp_c', title: 'GPU temperature', unit: '°C' },
  { metric: 'sm_clock_mhz', title: 'SM clock', unit: 'MHz' },
  { metric: 'power_w', title: 'GPU power', unit: 'W' },
];

/** The GPUs seen during the run, by index, with the name first reported. */
export function telemetryGpus(points: readonly TelemetryPoint[]): { index: number; name: string | null }[] {
  const seen = new Map<number, string | null>();
  for (const p of points) for (const g of p.gpus ?? []) if (!seen.has(g.index) || seen.get(g.index) == null) seen.set(g.index, g.name ?? null);
  return [...seen.entries()].sort((a, b) => a[0] - b[0]).map(([index, name]) => ({ index, name }));
}

/** One metric per GPU over the run (x in seconds); null when no GPU reported it. */
export function telemetrySeries(points: readonly TelemetryPoint[], metric: TelemetryMetric): XYData | null {
  const sorted = [...points].sort((a, b) => a.t_ms - b.t_ms);
  const gpus = telemetryGpus(sorted);
  const x = sorted.map((p) => p.t_ms / 1000);
  const value = (p: TelemetryPoint, index: number): number | null => {
    const g: TelemetryGpu | undefined = p.gpus?.find((x) => x.index === index);
    const v = g?.[metric];
    return v != null && Number.isFinite(v) ? v : null;
  };
  const series = gpus.map((g, i) => ({
    label: `GPU ${g.index}${g.name ? ` · ${g.name}` : ''}`,
    color: SERIES_COLORS[i % SERIES_COLORS.length]!,
    values: sorted.map((p) => value(p, g.index)),
  }));
  if (!series.some((s) => s.values.some((v) => v != null))) return null;
  return { x, series };
}

/** Whether any GPU's SM clock fell well below its own peak during the run (a throttle sign):
 *  the lowest clock while busy (utilization ≥ 50 %) under `share` of the highest. */
export function clockDropped(points: readonly TelemetryPoint[], share = 0.85): { index: number; min: number; max: number }[] {
  const byGpu = new Map<number, { min: number; max: number }>();
  for (const p of points) {
    for (const g of p.gpus ?? []) {
      const clock = g.sm_clock_mhz;
      if (clock == null || !Number.isFinite(clock)) continue;
      const seen = byGpu.get(g.index) ?? { min: Infinity, max: -Infinity };
      seen.max = Math.max(seen.max, clock);
      if ((g.util_pct ?? 0) >= 50) seen.min = Math.min(seen.min, clock);
      byGpu.set(g.index, seen);
    }
  }
  return [...byGpu.entries()]
    .filter(([, v]) => Number.isFinite(v.min) && v.max > 0 && v.min < v.max * share)
    .map(([index, v]) => ({ index, min: v.min, max: v.max }))
    .sort((a, b) => a.index - b.index);
}

/** A live frame as the daemon stores a run's telemetry point, `t_ms` after the run started. */
export function framePoint(frame: TelemetryFrame, startedAtMs: number): TelemetryPoint {
  const s = frame.sample;
  return {
    t_ms: s.at_ms - startedAtMs,
    gpus: s.gpus.gpus.map((g) => ({
      index: g.index,
      name: g.name,
      util_pct: g.utilization_gpu_pct,
      temp_c: g.temperature_mc == null ? null : g.temperature_mc / 1000,
      sm_clock_mhz: g.clocks?.sm_mhz ?? null,
      power_w: g.power_mw == null ? null : g.power_mw / 1000,
      mem_used_bytes: g.memory?.used_bytes ?? null,
    })),
    cpu_util_pct: s.host.cpu.usage_pct,
  };
}

/** The most live points kept between two reads of the run (a read replaces them). */
export const MAX_LIVE_POINTS = 3600;

/** The stored points, then the live ones that came after the last of them. */
export function withLivePoints(stored: readonly TelemetryPoint[], live: readonly TelemetryPoint[]): TelemetryPoint[] {
  const last = stored.reduce((m, p) => Math.max(m, p.t_ms), -Infinity);
  const after = live.filter((p) => p.t_ms > last);
  return after.length === 0 ? [...stored] : [...stored, ...after];
}
