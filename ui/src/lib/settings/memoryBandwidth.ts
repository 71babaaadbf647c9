// The host's memory bandwidth on the Settings page: the figure the planner uses for the CPU, where
// it comes from (Rigdeck's measurement, or the user's value, which wins), and how the measurement
// was taken.

import type { MemoryBandwidthReading, MemoryBandwidthStatus } from '../api/types';
import { formatBytes, MISSING } from '../format/units';

/** What the daemon accepts for a typed value, in GB/s. */
export const TYPED_MIN_GB_S = 1;
export const TYPED_MAX_GB_S = 10_000;

/** 41_523_000_000 → "41.5 GB/s" (decimal gigabytes, as memory makers state bandwidth). */
export function formatBandwidth(bytesPerS: number | null | undefined): string {
  if (bytesPerS == null || !Number.isFinite(bytesPerS) || bytesPerS <= 0) return MISSING;
  return `${(bytesPerS / 1e9).toFixed(1)} GB/s`;
}

/** "1.0 GiB read by 8 threads, best of 5 passes (2.1 s)". */
export function measurementMethod(m: MemoryBandwidthReading): string {
  const threads = `${m.threads} thread${m.threads === 1 ? '' : 's'}`;
  const passes = m.passes === 1 ? 'one pass' : `best of ${m.passes} passes`;
  return `${formatBytes(m.buffer_bytes)} read by ${threads}, ${passes} (${(m.elapsed_ms / 1000).toFixed(1)} s)`;
}

/** Where the figure in use comes from, in a sentence. */
export function sourceText(s: MemoryBandwidthStatus): string {
  switch (s.source) {
    case 'settings':
      return s.measured ? 'your value, which wins over the measurement' : 'your value';
    case 'measured':
      return 'measured by Rigdeck';
    default:
      return s.measuring ? 'being measured' : 'not measured yet';
  }
}

/** A typed value's problem, or null when the daemon will take it. */
export function typedBandwidthError(value: number | null | undefined): string | null {
  if (value == null || !Number.isFinite(value)) return 'Enter GB/s, e.g. 89.6 for dual-channel DDR5-5600.';
  if (value < TYPED_MIN_GB_S || value > TYPED_MAX_GB_S) return `Give between ${TYPED_MIN_GB_S} and ${TYPED_MAX_GB_S} GB/s.`;
  return null;
}
