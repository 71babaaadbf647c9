// Findings grouped per GPU and sorted worst first.

import { describe, expect, it } from 'vitest';
import { finding } from '../../test/frames';
import { findRule, groupFindings, sortBySeverity, worstSeverity } from './group';

const narrow3 = finding({ rule: 'pcie_narrow', severity: 'warning', gpu_index: 3, id: 'pcie_narrow:GPU-3' });
const hot3 = finding({ rule: 'gpu_hot', severity: 'critical', gpu_index: 3, id: 'gpu_hot:GPU-3' });
const genLow0 = finding({ rule: 'pcie_gen_low', severity: 'info', gpu_index: 0, id: 'pcie_gen_low:GPU-0' });
const swap = finding({ rule: 'swap_in_use', severity: 'info', id: 'swap_in_use' });
const ram = finding({ rule: 'ram_nearly_full', severity: 'warning', id: 'ram_nearly_full' });

describe('groupFindings', () => {
  it('splits host findings from per-GPU findings', () => {
    const g = groupFindings([narrow3, swap, genLow0, hot3, ram]);
    expect(g.host.map((f) => f.rule)).toEqual(['ram_nearly_full', 'swap_in_use']);
    expect([...g.byGpu.keys()].sort()).toEqual([0, 3]);
    expect(g.byGpu.get(3)!.map((f) => f.rule)).toEqual(['gpu_hot', 'pcie_narrow']);
    expect(g.byGpu.get(0)!.map((f) => f.rule)).toEqual(['pcie_gen_low']);
    expect(g.byGpu.get(1)).toBeUndefined();
  });

  it('lists everything worst first for the panel', () => {
    const g = groupFindings([swap, narrow3, hot3]);
    expect(g.all.map((f) => f.severity)).toEqual(['critical', 'warning', 'info']);
    expect(g.all).toHaveLength(3);
  });

  it('keeps the daemon order among equal severities', () => {
    expect(sortBySeverity([ram, narrow3]).map((f) => f.id)).toEqual(['ram_nearly_full', 'pcie_narrow:GPU-3']);
    expect(sortBySeverity([narrow3, ram]).map((f) => f.id)).toEqual(['pcie_narrow:GPU-3', 'ram_nearly_full']);
  });

  it('treats GPU index 0 as a GPU, not as "no GPU"', () => {
    expect(groupFindings([genLow0]).host).toEqual([]);
  });

  it('handles no findings', () => {
    const g = groupFindings([]);
    expect(g.host).toEqual([]);
    expect(g.byGpu.size).toBe(0);
    expect(worstSeverity([])).toBeNull();
  });

  it('finds the worst severity and a rule', () => {
    expect(worstSeverity([swap, narrow3])).toBe('warning');
    expect(findRule([narrow3, hot3], 'gpu_hot')).toBe(hot3);
    expect(findRule([narrow3], 'gpu_hot')).toBeNull();
  });
});
