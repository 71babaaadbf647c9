// The memory bandwidth panel's words: the figure, its source, and how it was measured.

import { describe, expect, it } from 'vitest';
import type { MemoryBandwidthStatus } from '../api/types';
import { formatBandwidth, measurementMethod, sourceText, typedBandwidthError } from './memoryBandwidth';

const reading = { bytes_per_s: 41_523_000_000, buffer_bytes: 1 << 30, threads: 8, passes: 5, elapsed_ms: 2140, measured_at_ms: 1 };

function status(over: Partial<MemoryBandwidthStatus>): MemoryBandwidthStatus {
  return { in_use_bytes_per_s: null, source: null, settings_gb_s: null, measured: null, measuring: false, problem: null, ...over };
}

describe('memory bandwidth', () => {
  it('writes GB/s with one decimal, a dash when unknown', () => {
    expect(formatBandwidth(41_523_000_000)).toBe('41.5 GB/s');
    expect(formatBandwidth(null)).toBe('—');
    expect(formatBandwidth(0)).toBe('—');
  });

  it('says how the measurement was taken', () => {
    expect(measurementMethod(reading)).toBe('1.0 GiB read by 8 threads, best of 5 passes (2.1 s)');
    expect(measurementMethod({ ...reading, threads: 1, passes: 1 })).toBe('1.0 GiB read by 1 thread, one pass (2.1 s)');
  });

  it('names the source, the user’s value winning', () => {
    expect(sourceText(status({ source: 'settings', measured: reading }))).toBe('your value, which wins over the measurement');
    expect(sourceText(status({ source: 'settings' }))).toBe('your value');
    expect(sourceText(status({ source: 'measured', measured: reading }))).toBe('measured by Rigdeck');
    expect(sourceText(status({ measuring: true }))).toBe('being measured');
    expect(sourceText(status({}))).toBe('not measured yet');
  });

  it('checks a typed value as the daemon does', () => {
    expect(typedBandwidthError(89.6)).toBeNull();
    expect(typedBandwidthError(0.5)).toContain('between 1 and 10000');
    expect(typedBandwidthError(null)).toContain('89.6');
  });
});
