// The live point buffer: the last 15 minutes of chartable values per GPU and for the host, built from
// the WebSocket frames. Pure functions that return a new buffer, so Svelte sees every change and
// tests can feed frames directly. Values stay in raw units (bytes, mW, m°C); charts convert.

import type { GpuSnapshot, TelemetryFrame } from '../api/types';

export const BUFFER_WINDOW_MS = 15 * 60_000;

export type Value = number | null;

export interface GpuSeries {
  key: string;
  index: number;
  name: string | null;
  t: number[];
  utilization: Value[];
  vramUsed: Value[];
  temperature: Value[];
  power: Value[];
  /** Latest known total, for the VRAM chart's y-axis. */
  vramTotal: number | null;
}

export interface HostSeries {
  t: number[];
  cpu: Value[];
  ramUsed: Value[];
  ramTotal: number | null;
}

export interface SeriesBuffer {
  /** Keyed by gpuKey(); insertion order is first-seen order. */
  gpus: ReadonlyMap<string, GpuSeries>;
  host: HostSeries;
  /** Time of the newest frame taken in, or null when empty. */
  lastAt: number | null;
}

export interface AppendOptions {
  windowMs?: number;
  /** A jump between points bigger than this (a reconnect, a GPU that went away and came back)
   *  gets a null point so the chart shows a gap instead of a straight line across it. */
  gapMs?: number;
}

export function emptyBuffer(): SeriesBuffer {
  return { gpus: new Map(), host: { t: [], cpu: [], ramUsed: [], ramTotal: null }, lastAt: null };
}

/** A GPU's identity across frames. NVML indexes can shift when a card drops off the bus, so the
 *  UUID wins; the index is the fallback for a card that does not report one. */
export function gpuKey(g: Pick<GpuSnapshot, 'uuid' | 'index'>): string {
  return g.uuid ?? `index:${g.index}`;
}

/** Index of the first time >= cutoff (times are ascending). */
export function firstIndexAtOrAfter(t: readonly number[], cutoff: number): number {
  let lo = 0;
  let hi = t.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (t[mid]! < cutoff) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Copies the series without the points before `cutoff` (a new object: the old one is untouched,
 *  which is what lets Svelte and uPlot see a changed array). */
function trimSeries<S extends { t: number[] }>(s: S, cols: readonly string[], cutoff: number): S {
  const from = firstIndexAtOrAfter(s.t, cutoff);
  const out = { ...s, t: s.t.slice(from) };
  const rec = out as Record<string, unknown>;
  for (const c of cols) rec[c] = (rec[c] as Value[]).slice(from);
  return out;
}

const GPU_COLS = ['utilization', 'vramUsed', 'temperature', 'power'] as const;
const HOST_COLS = ['cpu', 'ramUsed'] as const;

function pushRow<S extends { t: number[] }>(s: S, at: number, row: Partial<Record<string, Value>>, cols: readonly string[], gapMs: number): void {
  const last = s.t[s.t.length - 1];
  if (last !== undefined && at - last > gapMs) {
    // uPlot breaks a line only at a null, so mark the gap just after the last real point.
    s.t.push(last + 1);
    for (const c of cols) ((s as Record<string, unknown>)[c] as Value[]).push(null);
  }
  s.t.push(at);
  for (const c of cols) ((s as Record<string, unknown>)[c] as Value[]).push(row[c] ?? null);
}

function gpuRow(g: GpuSnapshot): Record<(typeof GPU_COLS)[number], Value> {
  // A lost GPU reports nothing; its row is all nulls, a visible gap.
  return {
    utilization: g.utilization_gpu_pct,
    vramUsed: g.memory?.used_bytes ?? null,
    temperature: g.temperature_mc,
    power: g.power_mw,
  };
}

/** Takes one frame into the buffer and drops everything older than the window, measured from the
 *  frame's own time. A frame not newer than the last one (the repeat sent after a reconnect) is
 *  ignored. A GPU missing from the frame gets no point; its series is dropped once all of its points
 *  have aged out. */
export function appendFrame(buf: SeriesBuffer, frame: TelemetryFrame, opts: AppendOptions = {}): SeriesBuffer {
  const windowMs = opts.windowMs ?? BUFFER_WINDOW_MS;
  const gapMs = opts.gapMs ?? 5_000;
  const at = frame.sample.at_ms;
  if (buf.lastAt !== null && at <= buf.lastAt) return buf;
  const cutoff = at - windowMs;

  const gpus = new Map<string, GpuSeries>();
  const seen = new Set<string>();
  for (const g of frame.sample.gpus.gpus) {
    const key = gpuKey(g);
    if (seen.has(key)) continue;
    seen.add(key);
    const prev = buf.gpus.get(key);
    const s: GpuSeries = prev
      ? trimSeries(prev, GPU_COLS, cutoff)
      : { key, index: g.index, name: g.name, t: [], utilization: [], vramUsed: [], temperature: [], power: [], vramTotal: null };
    s.index = g.index;
    s.name = g.name ?? s.name;
    if (g.memory) s.vramTotal = g.memory.total_bytes;
    pushRow(s, at, gpuRow(g), GPU_COLS, gapMs);
    gpus.set(key, s);
  }
  // GPUs that were in earlier frames but not in this one keep their history until it ages out.
  for (const [key, prev] of buf.gpus) {
    if (seen.has(key)) continue;
    const s = trimSeries(prev, GPU_COLS, cutoff);
    if (s.t.length > 0) gpus.set(key, s);
  }

  const mem = frame.sample.host.memory;
  const host = trimSeries(buf.host, HOST_COLS, cutoff);
  host.ramTotal = mem.total_bytes || host.ramTotal;
  pushRow(host, at, { cpu: frame.sample.host.cpu.usage_pct, ramUsed: mem.used_bytes }, HOST_COLS, gapMs);

  return { gpus, host, lastAt: at };
}

/** GPUs the buffer still remembers that the latest frame no longer lists: a card that vanished. */
export function vanishedGpus(buf: SeriesBuffer, frame: TelemetryFrame): { key: string; index: number; name: string | null; lastSeenMs: number }[] {
  const present = new Set(frame.sample.gpus.gpus.map(gpuKey));
  const out: { key: string; index: number; name: string | null; lastSeenMs: number }[] = [];
  for (const s of buf.gpus.values()) {
    if (present.has(s.key)) continue;
    out.push({ key: s.key, index: s.index, name: s.name, lastSeenMs: s.t[s.t.length - 1] ?? 0 });
  }
  return out.sort((a, b) => a.index - b.index);
}

/** The points of a series within [end - windowMs, end], as chart columns (time first). */
export function windowColumns(t: readonly number[], cols: readonly (readonly Value[])[], windowMs: number, end: number): [number[], ...Value[][]] {
  const from = firstIndexAtOrAfter(t, end - windowMs);
  return [t.slice(from), ...cols.map((c) => c.slice(from))];
}
