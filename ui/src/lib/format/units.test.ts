// Unit formatters: raw wire units to the text the cards show.

import { describe, expect, it } from 'vitest';
import {
  formatBandwidth,
  formatBytes,
  formatBytesPair,
  formatClockPair,
  formatMiB,
  formatPercent,
  formatPower,
  formatPowerPair,
  formatTemperature,
  fraction,
} from './units';

const GIB = 1024 ** 3;

describe('formatBytes', () => {
  it('uses binary units with one decimal', () => {
    expect(formatBytes(23.4 * GIB)).toBe('23.4 GiB');
    expect(formatBytes(24 * GIB)).toBe('24.0 GiB');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(512 * 1024 * 1024)).toBe('512.0 MiB');
    expect(formatBytes(2 * 1024 ** 4)).toBe('2.0 TiB');
  });
  it('keeps small values in bytes', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
  });
  it('does not print 1024.0 of a unit', () => {
    expect(formatBytes(1024 * 1024 - 1)).toBe('1.0 MiB');
  });
  it('renders a missing value as a dash', () => {
    expect(formatBytes(null)).toBe('—');
    expect(formatBytes(undefined)).toBe('—');
  });
  it('shares the unit in a pair when both match', () => {
    expect(formatBytesPair(20 * GIB, 24 * GIB)).toBe('20.0 / 24.0 GiB');
    expect(formatBytesPair(512 * 1024 * 1024, 24 * GIB)).toBe('512.0 MiB / 24.0 GiB');
  });
  it('prints per-process memory in whole MiB', () => {
    expect(formatMiB(1234 * 1024 * 1024)).toBe('1234 MiB');
    expect(formatMiB(null)).toBe('—');
  });
});

describe('formatPower', () => {
  it('turns milliwatts into watts', () => {
    expect(formatPower(180_000)).toBe('180 W');
    expect(formatPower(180_400)).toBe('180 W');
    expect(formatPower(5_300)).toBe('5.3 W');
    expect(formatPower(null)).toBe('—');
  });
  it('shows draw against limit', () => {
    expect(formatPowerPair(180_000, 350_000)).toBe('180 / 350 W');
    expect(formatPowerPair(180_000, null)).toBe('180 W');
    expect(formatPowerPair(null, 350_000)).toBe('—');
  });
});

describe('formatTemperature', () => {
  it('turns milli-degrees into whole degrees', () => {
    expect(formatTemperature(55_000)).toBe('55 °C');
    expect(formatTemperature(55_600)).toBe('56 °C');
    expect(formatTemperature(null)).toBe('—');
  });
});

describe('formatBandwidth', () => {
  it('uses decimal rate units', () => {
    expect(formatBandwidth(936_192_000_000)).toBe('936 GB/s');
    expect(formatBandwidth(1_200_000_000)).toBe('1.2 GB/s');
    expect(formatBandwidth(350_000_000)).toBe('350 MB/s');
    expect(formatBandwidth(15_500_000)).toBe('15.5 MB/s');
    expect(formatBandwidth(0)).toBe('0 B/s');
    expect(formatBandwidth(999_999)).toBe('1.0 MB/s');
    expect(formatBandwidth(null)).toBe('—');
  });
});

describe('other readings', () => {
  it('formats percentages and clock pairs', () => {
    expect(formatPercent(87.4)).toBe('87 %');
    expect(formatClockPair(1695, 2100)).toBe('1695 / 2100 MHz');
    expect(formatClockPair(null, 2100)).toBe('— / 2100 MHz');
    expect(formatClockPair(1695, null)).toBe('1695 MHz');
  });
  it('computes a clamped fraction', () => {
    expect(fraction(20, 80)).toBe(25);
    expect(fraction(90, 80)).toBe(100);
    expect(fraction(1, 0)).toBeNull();
    expect(fraction(null, 10)).toBeNull();
  });
});
