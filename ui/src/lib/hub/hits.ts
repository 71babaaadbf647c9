// Search hits as the results list shows them: counts in the short form the hub uses, and how long
// ago a model was updated.

import { MISSING } from '../format/units';

/** 1234 → "1.2K", 5_400_000 → "5.4M", 999 → "999". */
export function compactCount(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return MISSING;
  const units: [number, string][] = [
    [1e9, 'B'],
    [1e6, 'M'],
    [1e3, 'K'],
  ];
  for (const [size, unit] of units) {
    if (n >= size) {
      const v = n / size;
      return `${v >= 100 ? Math.round(v) : Number(v.toFixed(1))}${unit}`;
    }
  }
  return String(Math.round(n));
}

/** "today", "3 days ago", "5 months ago", "2 years ago" from the hub's ISO date; a dash when absent. */
export function updatedText(iso: string | null | undefined, nowMs: number = Date.now()): string {
  if (!iso) return MISSING;
  const at = Date.parse(iso);
  if (!Number.isFinite(at)) return MISSING;
  const days = Math.floor((nowMs - at) / 86_400_000);
  if (days < 1) return 'today';
  if (days < 31) return days === 1 ? 'yesterday' : `${days} days ago`;
  const months = Math.floor(days / 30.44);
  if (months < 12) return months === 1 ? 'a month ago' : `${months} months ago`;
  const years = Math.floor(days / 365.25);
  return years === 1 ? 'a year ago' : `${years} years ago`;
}

/** An address from the daemon, kept only when it is absolute http(s) (it ends up in an href). */
export function httpUrl(url: string | null | undefined): string | null {
  return url && /^https?:\/\//i.test(url) ? url : null;
}
