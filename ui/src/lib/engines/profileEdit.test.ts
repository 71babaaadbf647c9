// The profile settings form: read from a profile, written back, bad input named.

import { describe, expect, it } from 'vitest';
import type { LaunchProfile } from '../api/types';
import { applySettings, parseEnv, settingsOf } from './profileEdit';

const saved: LaunchProfile = {
  name: 'qwen',
  engine_build_id: 1,
  model: '/m.gguf',
  env: { CUDA_VISIBLE_DEVICES: '0,1' },
  restart: { policy: 'on_failure', max_restarts: 3, initial_backoff_ms: 1000, max_backoff_ms: 30000 },
};

describe('profile settings', () => {
  it('reads and writes the gateway section with the rest', () => {
    const withGateway: LaunchProfile = {
      ...saved,
      gateway: { aliases: ['gpt-4o-mini'], on_demand: true, pinned: false, idle_ttl_s: 900, max_concurrent: 2 },
    };
    const s = settingsOf(withGateway);
    expect(s.gateway).toEqual({ aliases: 'gpt-4o-mini', onDemand: true, pinned: false, idleMinutes: 15, maxConcurrent: 2 });
    const r = applySettings(withGateway, { ...s, gateway: { ...s.gateway, aliases: 'gpt-4o-mini, small', idleMinutes: null } });
    expect('profile' in r && r.profile.gateway).toEqual({
      aliases: ['gpt-4o-mini', 'small'],
      on_demand: true,
      pinned: false,
      idle_ttl_s: null,
      max_concurrent: 2,
    });
  });

  it('reads the defaults a profile leaves out', () => {
    expect(settingsOf(saved)).toEqual({
      autostart: false,
      restartOnFailure: true,
      maxRestarts: 3,
      host: '127.0.0.1',
      port: 0,
      apiKey: '',
      env: 'CUDA_VISIBLE_DEVICES=0,1',
      gateway: { aliases: '', onDemand: false, pinned: false, idleMinutes: null, maxConcurrent: null },
    });
  });

  it('writes them back, keeping the rest of the profile and the backoff', () => {
    const s = { ...settingsOf(saved), autostart: true, maxRestarts: 5, apiKey: ' k ', env: 'A=1\n\nB=x=y' };
    const r = applySettings(saved, s);
    expect('profile' in r && r.profile).toEqual({
      ...saved,
      autostart: true,
      restart: { policy: 'on_failure', max_restarts: 5, initial_backoff_ms: 1000, max_backoff_ms: 30000 },
      host: '127.0.0.1',
      port: 0,
      api_key: 'k',
      env: { A: '1', B: 'x=y' },
      gateway: { aliases: [], on_demand: false, pinned: false, idle_ttl_s: null, max_concurrent: null },
    });
    const never = applySettings(saved, { ...settingsOf(saved), restartOnFailure: false });
    expect('profile' in never && never.profile.restart).toEqual({ policy: 'never' });
  });

  it('names bad input', () => {
    expect(parseEnv('A=1\n2BAD=x')).toEqual({ error: expect.stringContaining('line 2 ("2BAD=x")') });
    expect(parseEnv('NOEQUALS')).toEqual({ error: expect.stringContaining('line 1') });
    expect(applySettings(saved, { ...settingsOf(saved), port: 70000 })).toEqual({ error: expect.stringContaining('65535') });
    expect(applySettings(saved, { ...settingsOf(saved), maxRestarts: 0 })).toEqual({ error: expect.stringContaining('1 or more') });
    const badGateway = { ...settingsOf(saved).gateway, maxConcurrent: 0 };
    expect(applySettings(saved, { ...settingsOf(saved), gateway: badGateway })).toEqual({ error: expect.stringContaining('Max concurrent') });
  });
});
