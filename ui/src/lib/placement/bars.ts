// Bar math for a device column: the four parts of a device's memory (weights, KV cache, compute
// buffers, overhead) against what it may use (capacity minus the user's reserve), in GiB.

import type { DevicePlan, DeviceSpec } from '../api/types';

export const GIB = 1024 ** 3;

export type SegmentKind = 'weights' | 'kv' | 'compute' | 'overhead';

export const SEGMENTS: { kind: SegmentKind; label: string }[] = [
  { kind: 'weights', label: 'Weights' },
  { kind: 'kv', label: 'KV cache' },
  { kind: 'compute', label: 'Compute' },
  { kind: 'overhead', label: 'Overhead' },
];

/** Bytes as GiB with one decimal, no unit: 25769803776 → "24.0". */
export function gib(bytes: number, digits = 1): string {
  if (!Number.isFinite(bytes)) return '—';
  const v = bytes / GIB;
  // -0.0 reads oddly; anything that rounds to zero is "0.0".
  const s = v.toFixed(digits);
  return Number(s) === 0 ? (0).toFixed(digits) : s;
}

/** "23.1 GiB". */
export function formatGiB(bytes: number, digits = 1): string {
  return `${gib(bytes, digits)} GiB`;
}

export interface BarSegment {
  kind: SegmentKind;
  bytes: number;
  /** Width in percent of the bar. */
  pct: number;
}

export interface DeviceBar {
  /** Capacity minus reserve: what the plan may fill. */
  usable: number;
  used: number;
  /** What is left of `usable` (0 when over). */
  free: number;
  /** The daemon's overflow figure: how far past `usable` the plan goes. */
  overflow: number;
  /** The bar spans max(usable, used), so an overflow sticks out past the capacity mark. */
  scale: number;
  segments: BarSegment[];
  /** Where the capacity mark sits, in percent of the bar (100 unless over). */
  capacityPct: number;
  /** Share of `usable` in use, in percent (can pass 100). */
  usedPct: number;
}

export function deviceBar(d: DevicePlan): DeviceBar {
  const u = d.usage;
  const bytes: Record<SegmentKind, number> = {
    weights: u.weights_bytes,
    kv: u.kv_bytes,
    compute: u.compute_bytes,
    overhead: u.overhead_bytes,
  };
  const used = bytes.weights + bytes.kv + bytes.compute + bytes.overhead;
  const usable = Math.max(0, d.spec.capacity_bytes - d.spec.reserve_bytes);
  const scale = Math.max(usable, used, 1);
  return {
    usable,
    used,
    free: Math.max(0, usable - used),
    overflow: d.overflow_bytes,
    scale,
    segments: SEGMENTS.map((s) => ({ kind: s.kind, bytes: bytes[s.kind], pct: (bytes[s.kind] / scale) * 100 })),
    capacityPct: (usable / scale) * 100,
    usedPct: usable > 0 ? (used / usable) * 100 : used > 0 ? Infinity : 0,
  };
}

/** The column's headline: "22.9 / 23.5 GiB" or "48.1 / 23.5 GiB · over by 24.6 GiB". */
export function barSummary(bar: DeviceBar): string {
  const base = `${gib(bar.used)} / ${formatGiB(bar.usable)}`;
  return bar.overflow > 0 ? `${base} · over by ${formatGiB(bar.overflow)}` : base;
}

/** The RAM reserve the planner kept when it is not the margin asked for (`asked`): on a host with
 *  little RAM available it keeps at most a quarter of it (crates/core/src/live_rig.rs). Null when
 *  it kept what was asked, or the rig has no CPU device. */
export function plannedRamReserve(devices: DeviceSpec[], asked: number): string | null {
  const cpu = devices.find((d) => d.id.kind === 'cpu');
  if (!cpu || cpu.reserve_bytes >= asked) return null;
  return `${formatGiB(cpu.reserve_bytes)} kept: at most a quarter of the available ${formatGiB(cpu.capacity_bytes)}`;
}
