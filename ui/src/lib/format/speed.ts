// Request timings as the gateway reports them: latencies in milliseconds (time to first token, a
// request's duration) and decode speed in tokens per second. `null` renders as an em dash.

import { MISSING } from './units';
import { formatDuration } from './time';

/** 84 → "84 ms", 1234 → "1.23 s", 15400 → "15.4 s", 75000 → "1 min". */
export function formatLatency(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms) || ms < 0) return MISSING;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return formatDuration(ms);
}

/** 45.23 → "45.2 tok/s", 312.7 → "313 tok/s", 0.42 → "0.42 tok/s". */
export function formatTokensPerSecond(tps: number | null | undefined): string {
  if (tps == null || !Number.isFinite(tps) || tps < 0) return MISSING;
  const digits = tps >= 100 ? 0 : tps >= 1 ? 1 : 2;
  return `${tps.toFixed(digits)} tok/s`;
}
