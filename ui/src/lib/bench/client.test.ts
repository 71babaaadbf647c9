// The benchmarks API's addresses.

import { describe, expect, it } from 'vitest';
import { exportPath } from './client';

describe('exportPath', () => {
  it('names the run and the format', () => {
    expect(exportPath(12, 'csv')).toBe('/api/v1/bench/runs/12/export?format=csv');
    expect(exportPath(12, 'md')).toBe('/api/v1/bench/runs/12/export?format=md');
  });
});
