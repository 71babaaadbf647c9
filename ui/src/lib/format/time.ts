// Time labels: clock time for "last seen" notes, durations for uptime.

export function formatClock(ms: number): string {
  return new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

export function formatDateTime(ms: number): string {
  return new Date(ms).toLocaleString(undefined, {
    year: 'numeric',
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
  });
}

/** 93784000 → "1 d 2 h"; 3725000 → "1 h 2 min"; 42000 → "42 s". Two units at most. */
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d > 0) return `${d} d ${h} h`;
  if (h > 0) return `${h} h ${m} min`;
  if (m > 0) return `${m} min`;
  return `${s} s`;
}

/** How long ago: "12 s ago", "5 min ago", "2 h 3 min ago"; "just now" under a second (and for a
 *  clock a little ahead of this one). */
export function formatAgo(atMs: number, nowMs: number): string {
  const d = nowMs - atMs;
  if (d < 1000) return 'just now';
  return `${formatDuration(d)} ago`;
}
