// CPU list compaction for NUMA nodes.

import { describe, expect, it } from 'vitest';
import { compactCpuList } from './cpus';

describe('compactCpuList', () => {
  it('collapses a contiguous node to one range', () => {
    expect(compactCpuList(Array.from({ length: 72 }, (_, i) => i))).toBe('0-71');
  });
  it('keeps singles and splits at holes', () => {
    expect(compactCpuList([0, 1, 2, 3, 5, 7, 8, 9])).toBe('0-3,5,7-9');
  });
  it('handles interleaved SMT siblings as the kernel lists them', () => {
    expect(compactCpuList([0, 1, 2, 3, 12, 13, 14, 15])).toBe('0-3,12-15');
  });
  it('sorts and de-duplicates input', () => {
    expect(compactCpuList([9, 8, 8, 1, 0])).toBe('0-1,8-9');
  });
  it('returns an empty string for no CPUs and a single number for one', () => {
    expect(compactCpuList([])).toBe('');
    expect(compactCpuList([42])).toBe('42');
  });
});
