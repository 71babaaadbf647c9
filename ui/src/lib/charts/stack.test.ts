// Stacked bars: running totals, the order handed to uPlot, the axis top.

import { describe, expect, it } from 'vitest';
import { cumulative, stackMax, stackedColumns } from './stack';

describe('stacked columns', () => {
  it('adds each series onto the ones below it', () => {
    expect(cumulative([[1, 2], [3, 4], [0, 1]])).toEqual([[1, 2], [4, 6], [4, 7]]);
    expect(cumulative([])).toEqual([]);
  });
  it('hands the total first so lower series paint over it', () => {
    expect(stackedColumns([10, 20], [[1, 2], [3, 4]])).toEqual([[10, 20], [4, 6], [1, 2]]);
  });
  it('tops the axis at the tallest stack, never below the floor', () => {
    expect(stackMax([[1, 2], [3, 4]])).toBe(6);
    expect(stackMax([[0, 0]])).toBe(1);
    expect(stackMax([])).toBe(1);
  });
});
