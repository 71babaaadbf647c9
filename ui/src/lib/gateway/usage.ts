// The Usage view's pure parts: the range picker (last hour, day, week) and its window, the
// per-model series shaped for the stacked charts (a full bucket grid with zeros where nothing ran,
// one colour per model kept across charts, the smallest models folded into "other"), request
// statuses as chips, error rates.

import type { GatewayUsage, RecentRequest, UsageCounts, UsagePoint } from '../api/types';
import type { Tone } from '../engines/instances';

export type UsageRange = 'hour' | 'day' | 'week';

export const USAGE_RANGE_MS: Record<UsageRange, number> = {
  hour: 3_600_000,
  day: 86_400_000,
  week: 7 * 86_400_000,
};

export const USAGE_RANGES: { value: UsageRange; label: string }[] = [
  { value: 'hour', label: 'Last hour' },
  { value: 'day', label: 'Last day' },
  { value: 'week', label: 'Last week' },
];

export function usageWindow(range: UsageRange, nowMs: number): { from_ms: number; to_ms: number } {
  return { from_ms: nowMs - USAGE_RANGE_MS[range], to_ms: nowMs };
}

/** "per minute", "per 5 min", "per hour", "per 6 h", "per day". */
export function bucketLabel(bucketMs: number): string {
  if (!Number.isFinite(bucketMs) || bucketMs <= 0) return '';
  const s = bucketMs / 1000;
  if (s < 60) return s === 1 ? 'per second' : `per ${Number(s.toFixed(1))} s`;
  const m = s / 60;
  if (m < 60) return m === 1 ? 'per minute' : `per ${Number(m.toFixed(1))} min`;
  const h = m / 60;
  if (h < 24) return h === 1 ? 'per hour' : `per ${Number(h.toFixed(1))} h`;
  const d = h / 24;
  return d === 1 ? 'per day' : `per ${Number(d.toFixed(1))} d`;
}

/** Series colours: the first for the busiest model. "other" is grey. */
export const SERIES_COLORS = ['#4ea1ff', '#3fb950', '#d29922', '#a371f7', '#f0883e', '#db61a2', '#39c5cf'];
export const OTHER_COLOR = '#8792a2';
/** More models than this: the smallest share one "other" series. */
export const MAX_SERIES = SERIES_COLORS.length + 1;

export type UsageMetric = 'requests' | 'tokens' | 'prompt_tokens' | 'completion_tokens';

export interface UsageSeries {
  /** Label: the model's name, or "other (3 models)". */
  label: string;
  color: string;
  /** The models in it (one, or several for "other"). */
  models: string[];
  requests: number[];
  prompt_tokens: number[];
  completion_tokens: number[];
}

export interface ShapedUsage {
  /** Bucket starts, oldest first, every bucket of the window (the daemon's buckets start at
   *  `from_ms`). */
  t: number[];
  bucketMs: number;
  /** Bottom of the stack first: the busiest model. */
  series: UsageSeries[];
}

/** Most buckets drawn; an answer with finer buckets over the window keeps only its own instants. */
const MAX_BUCKETS = 2000;

const mod = (a: number, b: number) => ((a % b) + b) % b;

/** Bucket starts over [from, to): on the points' own phase (the daemon counts buckets from
 *  `from_ms`), or the window's start without points. Points outside it get buckets of their own. */
function bucketGrid(points: readonly UsagePoint[], bucketMs: number, fromMs: number, toMs: number): { t: number[]; start: number } | null {
  if (!(bucketMs > 0) || toMs < fromMs || (toMs - fromMs) / bucketMs > MAX_BUCKETS) return null;
  const phase = points[0]?.t ?? fromMs;
  const start = fromMs - mod(fromMs - phase, bucketMs);
  const t: number[] = [];
  for (let x = start; x < toMs || x === start; x += bucketMs) t.push(x);
  const extra = points.map((p) => start + Math.floor((p.t - start) / bucketMs) * bucketMs).filter((x) => x < start || x > t[t.length - 1]!);
  return { t: extra.length ? [...new Set([...t, ...extra])].sort((a, b) => a - b) : t, start };
}

/** The answer's series on a full bucket grid over the window, one series per model. */
export function shapeUsage(series: GatewayUsage['series'], fromMs: number, toMs: number): ShapedUsage {
  const bucketMs = series.bucket_ms;
  const points = series.points;
  const grid = bucketGrid(points, bucketMs, fromMs, toMs);
  const t = grid ? grid.t : [...new Set(points.map((p) => p.t))].sort((a, b) => a - b);
  const index = new Map(t.map((x, i) => [x, i]));
  const slot = (pt: number) => index.get(grid ? grid.start + Math.floor((pt - grid.start) / bucketMs) * bucketMs : pt);

  const totals = new Map<string, { requests: number; tokens: number }>();
  for (const p of points) {
    const s = totals.get(p.model) ?? { requests: 0, tokens: 0 };
    s.requests += p.requests;
    s.tokens += p.prompt_tokens + p.completion_tokens;
    totals.set(p.model, s);
  }
  const order = [...totals.entries()]
    .sort(([a, x], [b, y]) => y.requests - x.requests || y.tokens - x.tokens || a.localeCompare(b))
    .map(([m]) => m);
  const kept = order.length > MAX_SERIES ? order.slice(0, MAX_SERIES - 1) : order;
  const folded = order.slice(kept.length);

  const empty = (): number[] => new Array<number>(t.length).fill(0);
  const out: UsageSeries[] = kept.map((m, i) => ({
    label: m,
    color: SERIES_COLORS[i % SERIES_COLORS.length]!,
    models: [m],
    requests: empty(),
    prompt_tokens: empty(),
    completion_tokens: empty(),
  }));
  if (folded.length) {
    out.push({
      label: `other (${folded.length} models)`,
      color: OTHER_COLOR,
      models: folded,
      requests: empty(),
      prompt_tokens: empty(),
      completion_tokens: empty(),
    });
  }
  const seriesOf = new Map<string, UsageSeries>();
  out.forEach((s) => s.models.forEach((m) => seriesOf.set(m, s)));
  for (const p of points) {
    const i = slot(p.t);
    const s = seriesOf.get(p.model);
    if (i == null || !s) continue;
    s.requests[i]! += p.requests;
    s.prompt_tokens[i]! += p.prompt_tokens;
    s.completion_tokens[i]! += p.completion_tokens;
  }
  return { t, bucketMs, series: out };
}

/** One metric's column of a series. */
export function metricColumn(s: UsageSeries, metric: UsageMetric): number[] {
  if (metric === 'tokens') return s.prompt_tokens.map((v, i) => v + s.completion_tokens[i]!);
  return s[metric];
}

/** Errors as a share of requests, in percent; null without requests. */
export function errorRate(c: Pick<UsageCounts, 'requests' | 'errors'>): number | null {
  return c.requests > 0 ? (c.errors / c.requests) * 100 : null;
}

// What each outcome means, as the gateway records it.
const STATUSES: Record<string, { label: string; tone: Tone; hint: string }> = {
  ok: { label: 'ok', tone: 'ok', hint: 'Answered in full.' },
  error: { label: 'error', tone: 'bad', hint: 'The engine answered with an error.' },
  engine_error: { label: 'engine error', tone: 'bad', hint: 'The engine could not be reached, or stopped mid-reply.' },
  cancelled: { label: 'cancelled', tone: 'muted', hint: "The client went away before the end; the engine's work stopped with it." },
  refused: { label: 'refused', tone: 'warn', hint: 'The gateway refused it: a bad body, an unknown model, or the model is not available.' },
  rate_limited: { label: 'rate limited', tone: 'warn', hint: "The model's concurrency limit was reached." },
};

export function statusLabel(status: string): string {
  return STATUSES[status]?.label ?? status.replace(/_/g, ' ');
}

export function statusTone(status: string): Tone {
  return STATUSES[status]?.tone ?? 'muted';
}

export function statusHint(r: Pick<RecentRequest, 'status' | 'http_status'>): string {
  const hint = STATUSES[r.status]?.hint ?? '';
  return `HTTP ${r.http_status}${hint ? ` · ${hint}` : ''}`;
}

/** Newest first. */
export function sortRecent(list: readonly RecentRequest[]): RecentRequest[] {
  return [...list].sort((a, b) => b.at_ms - a.at_ms);
}
