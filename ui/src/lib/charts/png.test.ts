// A saved chart's legend: entries left to right, wrapping when the next would pass the width.

import { describe, expect, it } from 'vitest';
import { legendLayout } from './png';

describe('legendLayout', () => {
  const measure = (t: string) => t.length * 6;
  it('wraps to a new row when an entry would pass the width', () => {
    const items = ['aggregate', 'per stream', 'a much longer label'].map((label) => ({ label, color: '#4ea1ff' }));
    const { placed, height } = legendLayout(items, 220, measure);
    expect(placed.map((p) => [p.x, p.y])).toEqual([
      [10, 0],
      [10 + 18 + 54 + 16, 0],
      [10, 18],
    ]);
    expect(height).toBe(36);
  });
  it('is empty without entries', () => {
    expect(legendLayout([], 200, measure)).toEqual({ placed: [], height: 0 });
  });
});
