// Hash routes.

import { describe, expect, it } from 'vitest';
import { hashParams, navRoute, parseHash, planHash } from './hash';

describe('parseHash', () => {
  it('maps the routes', () => {
    expect(parseHash('#/')).toBe('dashboard');
    expect(parseHash('')).toBe('dashboard');
    expect(parseHash('#/history')).toBe('history');
    expect(parseHash('#/settings/')).toBe('settings');
    expect(parseHash('#/history?range=1h')).toBe('history');
    expect(parseHash('#/models')).toBe('models');
    expect(parseHash('#/plan?model=%2Fm%2Fx.gguf')).toBe('plan');
    expect(parseHash('#/instances')).toBe('instances');
  });
  it('falls back to the dashboard for anything else', () => {
    expect(parseHash('#/nope')).toBe('dashboard');
  });
  it('shows the editor under Models in the navigation', () => {
    expect(navRoute('plan')).toBe('models');
    expect(navRoute('history')).toBe('history');
  });
});

describe('planHash and hashParams', () => {
  it('round-trip a model path with slashes, spaces and a rig', () => {
    const path = '/home/u/models/GLM 5.2/GLM-5.2-IQ2-00001-of-00006.gguf';
    const h = planHash(path, '4x3090');
    expect(parseHash(h)).toBe('plan');
    expect(hashParams(h).get('model')).toBe(path);
    expect(hashParams(h).get('rig')).toBe('4x3090');
  });
  it('leaves the live rig out of the address', () => {
    expect(hashParams(planHash('/m.gguf', 'live')).get('rig')).toBeNull();
    expect(hashParams('#/models').get('model')).toBeNull();
  });
});
