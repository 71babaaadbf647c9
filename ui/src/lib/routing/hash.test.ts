// Hash routes.

import { describe, expect, it } from 'vitest';
import { parseHash } from './hash';

describe('parseHash', () => {
  it('maps the three routes', () => {
    expect(parseHash('#/')).toBe('dashboard');
    expect(parseHash('')).toBe('dashboard');
    expect(parseHash('#/history')).toBe('history');
    expect(parseHash('#/settings/')).toBe('settings');
    expect(parseHash('#/history?range=1h')).toBe('history');
  });
  it('falls back to the dashboard for anything else', () => {
    expect(parseHash('#/nope')).toBe('dashboard');
  });
});
