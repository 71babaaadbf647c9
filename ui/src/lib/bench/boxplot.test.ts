// The box plot's numbers: quartiles from the warm runs the way numpy computes them, the cold run
// kept on its own, and round axis ticks.

import { describe, expect, it } from 'vitest';
import { point, step } from '../../test/bench';
import { boxesMax, boxStats, niceTicks, quantile, stepBoxes } from './boxplot';

describe('quartiles', () => {
  it('interpolate like numpy', () => {
    // numpy.percentile([1, 2, 3, 4, 10], [25, 50, 75]) = 2, 3, 4; [1, 2, 3, 4] → 1.75, 2.5, 3.25
    expect(boxStats([4, 1, 10, 3, 2])).toEqual({ n: 5, min: 1, q1: 2, median: 3, q3: 4, max: 10 });
    expect(boxStats([1, 2, 3, 4])).toEqual({ n: 4, min: 1, q1: 1.75, median: 2.5, q3: 3.25, max: 4 });
    expect(quantile([5], 0.75)).toBe(5);
  });
  it('skip missing values, and have none without any', () => {
    expect(boxStats([null, 7, Number.NaN])).toEqual({ n: 1, min: 7, q1: 7, median: 7, q3: 7, max: 7 });
    expect(boxStats([null, undefined])).toBeNull();
  });
});

describe('stepBoxes', () => {
  it('box the warm runs and keep the cold run beside them', () => {
    const boxes = stepBoxes([step(0, point(256, 512), 12, [40, 44, 42, 41]), step(1, point(256, 512, 0, { concurrency: 8 }), 90, [])]);
    expect(boxes[0]).toEqual({ index: 0, label: '256:512, 1 stream', box: { n: 4, min: 40, q1: 40.75, median: 41.5, q3: 42.5, max: 44 }, cold: 12 });
    expect(boxes[1]).toMatchObject({ label: '256:512, 8 streams', box: null, cold: 90 });
    expect(boxesMax(boxes)).toBe(90);
  });
});

describe('niceTicks', () => {
  it('step by round numbers up past the largest value', () => {
    expect(niceTicks(93)).toEqual([0, 20, 40, 60, 80, 100]);
    expect(niceTicks(4.2)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(niceTicks(1180)).toEqual([0, 250, 500, 750, 1000, 1250]);
    expect(niceTicks(0)).toEqual([0, 1]);
  });
});
