// Comparing picked runs: a row per point two or more measured, the ratio to the first picked run.

import { describe, expect, it } from 'vitest';
import { digest, point, probeSummary, summary } from '../../test/bench';
import { llamaSummary } from '../../test/llamaBench';
import { compareBases, compareRuns, splitPicks } from './compare';

const c = (n: number) => ({ concurrency: n });

describe('compareRuns', () => {
  const base = summary(1, { steps: [digest(point(256, 512, 0, c(1)), { aggregate_tps: 40, stream_tps: 40, ttft_ms: 100 }), digest(point(256, 512, 0, c(8)), { aggregate_tps: 200, stream_tps: 25, ttft_ms: 300 })] });
  const other = summary(2, { steps: [digest(point(256, 512, 0, c(8)), { aggregate_tps: 300, stream_tps: 37.5, ttft_ms: 150 }), digest(point(2048, 64, 0, c(1)))] });

  it('sets matching points side by side with the ratio to the base', () => {
    const { rows, unmatched } = compareRuns([base, other]);
    expect(rows.map((r) => r.label)).toEqual(['256:512, 8 streams']);
    expect(unmatched).toBe(2);
    const [b, o] = rows[0]!.cells;
    expect(b).toMatchObject({ aggregate: 200, aggregateRatio: null });
    expect(o).toMatchObject({ aggregate: 300, aggregateRatio: 1.5, streamRatio: 1.5, ttftRatio: 0.5 });
  });

  it('keeps a point two later runs share, without a ratio when the base lacks it', () => {
    const third = summary(3, { steps: [digest(point(2048, 64, 0, c(1)), { aggregate_tps: 10 })] });
    const { rows } = compareRuns([base, other, third]);
    const row = rows.find((r) => r.label === '2048:64, 1 stream')!;
    expect(row.cells[0]).toBeNull();
    expect(row.cells[1]).toMatchObject({ aggregateRatio: null });
    expect(row.cells[2]).toMatchObject({ aggregate: 10, aggregateRatio: null });
  });

  it('has no ratio against a missing or zero figure', () => {
    const zero = summary(4, { steps: [digest(point(256, 512, 0, c(8)), { aggregate_tps: 0, stream_tps: null })] });
    const { rows } = compareRuns([zero, other]);
    expect(rows[0]!.cells[1]).toMatchObject({ aggregateRatio: null, streamRatio: null });
  });
});

describe('splitPicks', () => {
  it('compares speed benchmarks and quality probes apart, each in pick order', () => {
    const picks = [probeSummary(5), summary(3, { steps: [digest(point(256, 512))] }), probeSummary(4), summary(1, { steps: [digest(point(256, 512))] })];
    const { speed, quality } = splitPicks(picks);
    expect(speed.map((r) => r.id)).toEqual([3, 1]);
    expect(quality.map((r) => r.id)).toEqual([5, 4]);
    // The speed comparison's base is the first speed benchmark picked, not the probe before it.
    const { rows } = compareRuns(speed);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.cells).toHaveLength(2);
    expect(rows[0]!.cells[0]?.aggregateRatio).toBeNull();
    expect(rows[0]!.cells[1]?.aggregateRatio).toBe(1);
  });
});

describe('compareBases', () => {
  it('marks the first picked of each kind that has another picked', () => {
    const p1 = probeSummary(5);
    const s1 = summary(3);
    const s2 = summary(1);
    const p2 = probeSummary(4);
    expect([...compareBases([p1, s1, s2])]).toEqual([3]);
    expect([...compareBases([p1, s1, s2, p2])].sort()).toEqual([3, 5]);
    expect([...compareBases([p1, s1])]).toEqual([]);
    expect([...compareBases([])]).toEqual([]);
  });
});

describe('llama-bench runs among the picks', () => {
  it('are compared apart, with a base of their own', () => {
    const picks = [llamaSummary(7), summary(3), llamaSummary(6), probeSummary(5), summary(1)];
    const { speed, quality, llamaBench } = splitPicks(picks);
    expect(speed.map((r) => r.id)).toEqual([3, 1]);
    expect(quality.map((r) => r.id)).toEqual([5]);
    expect(llamaBench.map((r) => r.id)).toEqual([7, 6]);
    expect([...compareBases(picks)].sort()).toEqual([3, 7]);
  });
});
