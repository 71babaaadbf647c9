// The frontier of one reference: which profiles are drawn, which wait for a speed run, and which
// nothing beats on both speed and closeness to the reference.

import { describe, expect, it } from 'vitest';
import { frontierPoint } from '../../test/quality';
import { frontierRanges, frontierView, paretoFront, type PlacedPoint } from './frontier';

describe('the frontier', () => {
  const f16 = frontierPoint('f16 kv', 0.001, 50);
  const q8 = frontierPoint('q8_0 kv', 0.004, 58);
  const q4 = frontierPoint('q4_0 kv', 0.05, 57);
  const slowBad = frontierPoint('broken', 0.2, 40);
  const unmeasured = frontierPoint('no speed', 0.01, null);

  it('draws the profiles with a speed by KLD and lists the rest apart', () => {
    const view = frontierView([q4, unmeasured, f16, slowBad, q8]);
    expect(view.placed.map((p) => p.profile)).toEqual(['f16 kv', 'q8_0 kv', 'q4_0 kv', 'broken']);
    expect(view.unplaced.map((p) => p.profile)).toEqual(['no speed']);
  });

  it('keeps on the front only the profiles nothing beats on both figures', () => {
    const view = frontierView([f16, q8, q4, slowBad]);
    expect([...view.front].sort()).toEqual(['f16 kv', 'q8_0 kv']);
  });

  it('keeps two equal points both on the front', () => {
    const a = frontierPoint('a', 0.01, 50) as PlacedPoint;
    const b = frontierPoint('b', 0.01, 50) as PlacedPoint;
    expect([...paretoFront([a, b])].sort()).toEqual(['a', 'b']);
  });

  it('is empty without points', () => {
    const view = frontierView([]);
    expect(view.placed).toEqual([]);
    expect(view.front.size).toBe(0);
  });

  it('ranges its axes from zero with room above the largest figure', () => {
    const view = frontierView([f16, q4]);
    const r = frontierRanges(view.placed);
    expect(r.x[0]).toBe(0);
    expect(r.x[1]).toBeCloseTo((0.05 + 0.0025) * 1.15);
    expect(r.y).toEqual([0, 57 * 1.15]);
    expect(frontierRanges([])).toEqual({ x: [0, 1e-3], y: [0, 1] });
  });
});
