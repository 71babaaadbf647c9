// The steps table: the cold run's own figures (medians of its requests where the run has none),
// and the optional columns shown only when some step has the figure.

import { describe, expect, it } from 'vitest';
import { point, runResult, sample, stats, step, stepSummary } from '../../test/bench';
import { acceptanceRate, coldFigures, coldRun, median, optionalColumns, warmRuns } from './steps';

describe('the cold run', () => {
  it('is found and figured on its own', () => {
    const s = step(0, point(256, 512), 12, [40, 41]);
    const cold = coldRun(s)!;
    expect(cold.index).toBe(0);
    expect(warmRuns(s)).toBe(2);
    const run = runResult(0, 12, {
      failed: 1,
      acceptance: { drafted: 100, accepted: 70, drafts: null },
      requests: [sample({ tpot_ms: 10, e2e_ms: 5000 }), sample({ tpot_ms: 14, e2e_ms: 7000 }), sample({ ok: false, error: 'refused', tpot_ms: 99, e2e_ms: 1 })],
    });
    expect(coldFigures(run)).toMatchObject({ aggregate_tps: 12, tpot_ms: 12, e2e_ms: 6000, acceptance: 0.7, failed: 1 });
  });
  it('medians skip missing values', () => {
    expect(median([3, null, 1, 2])).toBe(2);
    expect(median([4, 1])).toBe(2.5);
    expect(median([])).toBeNull();
  });
});

describe('optionalColumns', () => {
  it('shows a figure only when some step has it', () => {
    const plain = [step(0, point(256, 512), 12, [40])];
    expect(optionalColumns(plain)).toEqual({ prefill: true, engineDecode: false, acceptance: false, cacheHits: false, goodput: false, itl: false });
    const spec = [step(0, point(256, 512), 12, [40], { summary: stepSummary({ acceptance: stats([0.7]), itl_ms: stats([10]), goodput_rps: stats([0.2]) }) })];
    expect(optionalColumns(spec)).toMatchObject({ acceptance: true, itl: true, goodput: true, cacheHits: false });
  });
});

describe('acceptanceRate', () => {
  it('divides accepted by drafted, or takes the rate an engine reported itself', () => {
    expect(acceptanceRate({ acceptance: { drafted: 200, accepted: 150, drafts: 50 } })).toBe(0.75);
    expect(acceptanceRate({ acceptance: { drafted: 0, accepted: 0, drafts: null, reported_rate: 0.55, reported_length: 2.9 } })).toBe(0.55);
    expect(acceptanceRate({ acceptance: null })).toBeNull();
  });
});
