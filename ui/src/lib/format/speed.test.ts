// Latencies and decode speed; the relative "ago" text.

import { describe, expect, it } from 'vitest';
import { formatLatency, formatTokensPerSecond } from './speed';
import { formatAgo } from './time';

describe('request timings', () => {
  it('shows milliseconds, then seconds, then minutes', () => {
    expect(formatLatency(84.4)).toBe('84 ms');
    expect(formatLatency(999.4)).toBe('999 ms');
    expect(formatLatency(1234)).toBe('1.23 s');
    expect(formatLatency(15_400)).toBe('15.4 s');
    expect(formatLatency(75_000)).toBe('1 min');
    expect(formatLatency(null)).toBe('—');
    expect(formatLatency(-1)).toBe('—');
  });
  it('shows decode speed with fewer decimals as it grows', () => {
    expect(formatTokensPerSecond(45.23)).toBe('45.2 tok/s');
    expect(formatTokensPerSecond(312.7)).toBe('313 tok/s');
    expect(formatTokensPerSecond(0.424)).toBe('0.42 tok/s');
    expect(formatTokensPerSecond(undefined)).toBe('—');
    expect(formatTokensPerSecond(Number.NaN)).toBe('—');
  });
  it('says how long ago', () => {
    expect(formatAgo(1000, 1500)).toBe('just now');
    expect(formatAgo(2000, 1000)).toBe('just now');
    expect(formatAgo(0, 12_000)).toBe('12 s ago');
    expect(formatAgo(0, 3_725_000)).toBe('1 h 2 min ago');
  });
});
