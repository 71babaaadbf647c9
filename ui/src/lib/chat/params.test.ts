// The sampling form: empty is the default, ranges checked, reasoning kept.

import { describe, expect, it } from 'vitest';
import { readSampling, sameParams, samplingForm, withSampling } from './params';

describe('the sampling form', () => {
  it('starts from the params, empty where the default applies', () => {
    expect(samplingForm({ temperature: 0.7, max_tokens: 4000, top_k: null })).toEqual({ temperature: '0.7', top_p: '', top_k: '', min_p: '', max_tokens: '4000' });
  });
  it('reads numbers and empties', () => {
    expect(readSampling({ temperature: ' 0.6 ', top_p: '', top_k: '40', min_p: '0.05', max_tokens: '4000' })).toEqual({
      ok: true,
      values: { temperature: 0.6, top_p: null, top_k: 40, min_p: 0.05, max_tokens: 4000 },
    });
  });
  it('names what is wrong', () => {
    const r = readSampling({ temperature: 'hot', top_p: '1.5', top_k: '4.5', min_p: '', max_tokens: '0' });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.errors.temperature).toMatch(/not a number/);
      expect(r.errors.top_p).toBe('Top P goes from 0 to 1');
      expect(r.errors.top_k).toBe('Top K is a whole number');
      expect(r.errors.max_tokens).toBe('Max tokens goes from 1 to 10000000');
      expect(r.errors.min_p).toBeUndefined();
    }
  });
  it('keeps reasoning when sampling changes, and compares params with null as missing', () => {
    const p = withSampling({ reasoning: 'off', temperature: 1 }, { temperature: 0.2, top_p: null, top_k: null, min_p: null, max_tokens: 10 });
    expect(p).toEqual({ reasoning: 'off', temperature: 0.2, top_p: null, top_k: null, min_p: null, max_tokens: 10 });
    expect(sameParams({ reasoning: null }, {})).toBe(true);
    expect(sameParams({ max_tokens: 10 }, { max_tokens: 11 })).toBe(false);
  });
});
