// GPU labels (CUDA version, compute capability, throttle reasons) and the core heat colour.

import { describe, expect, it } from 'vitest';
import { formatComputeCapability, formatCudaVersion, throttleLabel } from './gpu';
import { heatColor } from './heat';

describe('GPU labels', () => {
  it('formats the CUDA driver version integer', () => {
    expect(formatCudaVersion(13000)).toBe('13.0');
    expect(formatCudaVersion(12040)).toBe('12.4');
    expect(formatCudaVersion(null)).toBeNull();
  });
  it('formats compute capability', () => {
    expect(formatComputeCapability({ major: 8, minor: 6 })).toBe('8.6');
    expect(formatComputeCapability(null)).toBe('—');
  });
  it('labels known throttle reasons with a tone and falls back for new ones', () => {
    expect(throttleLabel('sw_power_cap')).toMatchObject({ label: 'power cap', tone: 'warn' });
    expect(throttleLabel('hw_thermal_slowdown').tone).toBe('bad');
    expect(throttleLabel('gpu_idle').tone).toBe('neutral');
    expect(throttleLabel('some_new_reason')).toMatchObject({ label: 'some new reason', tone: 'warn' });
  });
  it('colours idle cores dim and busy cores red', () => {
    expect(heatColor(0)).toBe('hsl(215 25% 18%)');
    expect(heatColor(100)).toBe('hsl(0 85% 55%)');
    expect(heatColor(null)).toBe('#1b2129');
  });
});
