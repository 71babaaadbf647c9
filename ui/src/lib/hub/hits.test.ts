// Search hit formatting.

import { describe, expect, it } from 'vitest';
import { compactCount, httpUrl, updatedText } from './hits';

describe('compactCount', () => {
  it('shortens like the hub', () => {
    expect(compactCount(999)).toBe('999');
    expect(compactCount(1234)).toBe('1.2K');
    expect(compactCount(5_400_000)).toBe('5.4M');
    expect(compactCount(123_456_789)).toBe('123M');
    expect(compactCount(2_000)).toBe('2K');
    expect(compactCount(null)).toBe('—');
  });
});

describe('updatedText', () => {
  const now = Date.parse('2026-11-20T12:00:00Z');
  it('says how long ago', () => {
    expect(updatedText('2026-11-20T08:00:00.000Z', now)).toBe('today');
    expect(updatedText('2026-11-19T08:00:00.000Z', now)).toBe('yesterday');
    expect(updatedText('2026-11-01T00:00:00.000Z', now)).toBe('19 days ago');
    expect(updatedText('2026-06-01T00:00:00.000Z', now)).toBe('5 months ago');
    expect(updatedText('2024-10-01T00:00:00.000Z', now)).toBe('2 years ago');
    expect(updatedText(null, now)).toBe('—');
    expect(updatedText('not a date', now)).toBe('—');
  });
});

describe('httpUrl', () => {
  it('keeps http(s) addresses only', () => {
    expect(httpUrl('https://huggingface.co/org/m')).toBe('https://huggingface.co/org/m');
    expect(httpUrl('javascript:alert(1)')).toBeNull();
    expect(httpUrl(null)).toBeNull();
  });
});
