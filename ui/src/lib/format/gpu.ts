// Small GPU-specific labels: throttle reasons, compute capability, CUDA driver version.

import type { ComputeCapability } from '../api/types';

export type ChipTone = 'neutral' | 'warn' | 'bad';

interface ThrottleLabel {
  label: string;
  tone: ChipTone;
  hint: string;
}

// NVML clock-event reasons. Idle and application clocks are normal; power caps limit speed;
// thermal and hardware slowdowns mean the card is protecting itself.
const THROTTLE: Record<string, ThrottleLabel> = {
  gpu_idle: { label: 'idle', tone: 'neutral', hint: 'Clocks are low because nothing is running.' },
  applications_clocks_setting: { label: 'app clocks', tone: 'neutral', hint: 'Clocks are held by an application clock setting.' },
  sw_power_cap: { label: 'power cap', tone: 'warn', hint: 'Clocks are held back to stay under the power limit.' },
  hw_slowdown: { label: 'HW slowdown', tone: 'bad', hint: 'Hardware slowdown: overheating or the power supply asked the card to slow down.' },
  sync_boost: { label: 'sync boost', tone: 'neutral', hint: 'Clocks are matched to another GPU in a sync-boost group.' },
  sw_thermal_slowdown: { label: 'thermal (driver)', tone: 'bad', hint: 'The driver slows the card because it is too hot.' },
  hw_thermal_slowdown: { label: 'thermal (HW)', tone: 'bad', hint: 'The card itself slows down because it is too hot.' },
  hw_power_brake_slowdown: { label: 'power brake', tone: 'bad', hint: 'An external power brake signal slows the card (often the PSU).' },
  display_clock_setting: { label: 'display clocks', tone: 'neutral', hint: 'Clocks follow the display clock setting.' },
};

export function throttleLabel(reason: string): ThrottleLabel {
  return THROTTLE[reason] ?? { label: reason.replace(/_/g, ' '), tone: 'warn', hint: reason };
}

export function formatComputeCapability(cc: ComputeCapability | null): string {
  return cc ? `${cc.major}.${cc.minor}` : '—';
}

/** NVML's CUDA driver version integer: 13000 → "13.0", 12040 → "12.4". */
export function formatCudaVersion(v: number | null): string | null {
  if (v == null || v <= 0) return null;
  return `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`;
}
