// History page helpers: range lengths and the label that says where the points came from.

import type { History, HistoryRange } from '../api/types';

export const RANGE_MS: Record<HistoryRange, number> = {
  '15m': 15 * 60_000,
  '1h': 60 * 60_000,
  '24h': 24 * 60 * 60_000,
};

export const RANGES: { value: HistoryRange; label: string }[] = [
  { value: '15m', label: '15 min' },
  { value: '1h', label: '1 h' },
  { value: '24h', label: '24 h' },
];

/** "from memory" or "10 s averages from the database" (the step comes from the answer). */
export function sourceLabel(h: Pick<History, 'source' | 'step_ms'>): string {
  if (h.source === 'memory') return 'from memory';
  const s = h.step_ms / 1000;
  const step = Number.isInteger(s) ? `${s} s` : `${s.toFixed(1)} s`;
  return `${step} averages from the database`;
}

/** Right edge of the charts: the newest point anywhere in the answer, or now when it is empty. */
export function historyEnd(h: History, now: number): number {
  let end = -Infinity;
  for (const g of h.gpus) end = Math.max(end, g.t[g.t.length - 1] ?? -Infinity);
  end = Math.max(end, h.host.t[h.host.t.length - 1] ?? -Infinity);
  return Number.isFinite(end) ? end : now;
}
