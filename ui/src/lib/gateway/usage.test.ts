// Usage shaping: the range window, bucket labels, the series on a full bucket grid (zeros where
// nothing ran, the busiest model first with the first colour, the smallest folded into "other"),
// request statuses, error rates.

import { describe, expect, it } from 'vitest';
import type { UsagePoint } from '../api/types';
import { recent, T0 } from '../../test/gateway';
import {
  bucketLabel,
  errorRate,
  MAX_SERIES,
  metricColumn,
  OTHER_COLOR,
  SERIES_COLORS,
  shapeUsage,
  sortRecent,
  statusHint,
  statusLabel,
  statusTone,
  usageWindow,
} from './usage';

const MIN = 60_000;
/** A minute-aligned start, so the grid's first bucket is `START`. */
const START = Math.floor(T0 / MIN) * MIN;

function pt(i: number, model: string, requests: number, prompt = 0, completion = 0): UsagePoint {
  return { t: START + i * MIN, model, requests, prompt_tokens: prompt, completion_tokens: completion };
}

describe('range', () => {
  it('ends now and reaches back an hour, a day or a week', () => {
    expect(usageWindow('hour', T0)).toEqual({ from_ms: T0 - 3_600_000, to_ms: T0 });
    expect(usageWindow('day', T0).from_ms).toBe(T0 - 86_400_000);
    expect(usageWindow('week', T0).from_ms).toBe(T0 - 7 * 86_400_000);
  });

  it('says the bucket size in words', () => {
    expect(bucketLabel(60_000)).toBe('per minute');
    expect(bucketLabel(300_000)).toBe('per 5 min');
    expect(bucketLabel(3_600_000)).toBe('per hour');
    expect(bucketLabel(6 * 3_600_000)).toBe('per 6 h');
    expect(bucketLabel(86_400_000)).toBe('per day');
    expect(bucketLabel(10_000)).toBe('per 10 s');
    expect(bucketLabel(0)).toBe('');
  });
});

describe('shapeUsage', () => {
  it('fills every bucket of the window, zero where nothing ran', () => {
    const s = shapeUsage({ bucket_ms: MIN, points: [pt(1, 'a', 2, 10, 5), pt(3, 'a', 1, 4, 1)] }, START, START + 5 * MIN);
    expect(s.t).toEqual([0, 1, 2, 3, 4].map((i) => START + i * MIN));
    expect(s.series).toHaveLength(1);
    expect(s.series[0]!.requests).toEqual([0, 2, 0, 1, 0]);
    expect(metricColumn(s.series[0]!, 'tokens')).toEqual([0, 15, 0, 5, 0]);
    expect(metricColumn(s.series[0]!, 'prompt_tokens')).toEqual([0, 10, 0, 4, 0]);
    expect(metricColumn(s.series[0]!, 'completion_tokens')).toEqual([0, 5, 0, 1, 0]);
  });

  it("counts buckets from the window's start, as the daemon does", () => {
    const from = START + 12_345;
    const at = (i: number): UsagePoint => ({ t: from + i * MIN, model: 'a', requests: i + 1, prompt_tokens: 0, completion_tokens: 0 });
    const s = shapeUsage({ bucket_ms: MIN, points: [at(0), at(2)] }, from, from + 3 * MIN);
    expect(s.t).toEqual([from, from + MIN, from + 2 * MIN]);
    expect(s.series[0]!.requests).toEqual([1, 0, 3]);
    // Without points: the window's start.
    expect(shapeUsage({ bucket_ms: MIN, points: [] }, from, from + 2 * MIN).t).toEqual([from, from + MIN]);
  });

  it('orders models by requests (then tokens, then name) with stable colours', () => {
    const points = [pt(0, 'small', 1, 1), pt(0, 'busy', 5), pt(1, 'busy', 5), pt(1, 'wordy', 1, 900), pt(2, 'also-small', 1, 1)];
    const s = shapeUsage({ bucket_ms: MIN, points }, START, START + 3 * MIN);
    expect(s.series.map((x) => x.label)).toEqual(['busy', 'wordy', 'also-small', 'small']);
    expect(s.series.map((x) => x.color)).toEqual(SERIES_COLORS.slice(0, 4));
    expect(s.series[0]!.requests).toEqual([5, 5, 0]);
  });

  it('adds points of one model in one bucket, and snaps points off the grid to their bucket', () => {
    const points = [pt(1, 'a', 1), pt(1, 'a', 2), { ...pt(2, 'a', 4), t: START + 2 * MIN + 1234 }];
    const s = shapeUsage({ bucket_ms: MIN, points }, START, START + 3 * MIN);
    expect(s.series[0]!.requests).toEqual([0, 3, 4]);
  });

  it('keeps points outside the window in buckets of their own', () => {
    const s = shapeUsage({ bucket_ms: MIN, points: [pt(-2, 'a', 1), pt(1, 'a', 1)] }, START, START + 2 * MIN);
    expect(s.t).toEqual([START - 2 * MIN, START, START + MIN]);
    expect(s.series[0]!.requests).toEqual([1, 0, 1]);
  });

  it('folds the smallest models into one grey "other" series', () => {
    const n = MAX_SERIES + 2;
    const points = Array.from({ length: n }, (_, i) => pt(0, `m${String(i).padStart(2, '0')}`, n - i));
    const s = shapeUsage({ bucket_ms: MIN, points }, START, START);
    expect(s.series).toHaveLength(MAX_SERIES);
    const other = s.series.at(-1)!;
    expect(other.label).toBe('other (3 models)');
    expect(other.color).toBe(OTHER_COLOR);
    expect(other.models).toEqual([`m0${MAX_SERIES - 1}`, `m0${MAX_SERIES}`, `m0${MAX_SERIES + 1}`]);
    expect(other.requests).toEqual([3 + 2 + 1]);
  });

  it('has no series without points, and uses the points alone when the buckets make no grid', () => {
    expect(shapeUsage({ bucket_ms: MIN, points: [] }, START, START + 2 * MIN).series).toEqual([]);
    const s = shapeUsage({ bucket_ms: 0, points: [pt(5, 'a', 1), pt(2, 'a', 1)] }, START, START + 10 * MIN);
    expect(s.t).toEqual([START + 2 * MIN, START + 5 * MIN]);
    expect(s.series[0]!.requests).toEqual([1, 1]);
    // Far too many buckets for the window: the points' own instants.
    const fine = shapeUsage({ bucket_ms: 1, points: [pt(1, 'a', 1)] }, START, START + 10 * MIN);
    expect(fine.t).toEqual([START + MIN]);
  });
});

describe('requests', () => {
  it('label and colour statuses, unknown ones readable', () => {
    expect(statusLabel('ok')).toBe('ok');
    expect(statusLabel('engine_error')).toBe('engine error');
    expect(statusLabel('rate_limited')).toBe('rate limited');
    expect(statusLabel('queue_full')).toBe('queue full');
    expect(statusTone('ok')).toBe('ok');
    expect(statusTone('error')).toBe('bad');
    expect(statusTone('engine_error')).toBe('bad');
    expect(statusTone('refused')).toBe('warn');
    expect(statusTone('rate_limited')).toBe('warn');
    expect(statusTone('cancelled')).toBe('muted');
    expect(statusTone('queue_full')).toBe('muted');
    expect(statusHint(recent(T0, { status: 'rate_limited', http_status: 429 }))).toBe("HTTP 429 · The model's concurrency limit was reached.");
    expect(statusHint(recent(T0, { status: 'new', http_status: 500 }))).toBe('HTTP 500');
  });

  it('list the newest first', () => {
    expect(sortRecent([recent(T0), recent(T0 + 2), recent(T0 + 1)]).map((r) => r.at_ms)).toEqual([T0 + 2, T0 + 1, T0]);
  });

  it('give the error rate in percent, none without requests', () => {
    expect(errorRate({ requests: 8, errors: 2 })).toBe(25);
    expect(errorRate({ requests: 0, errors: 0 })).toBeNull();
  });
});
