// What a benchmark can be pointed at, and a new form's first picks.

import { describe, expect, it } from 'vitest';
import type { InstanceView, LaunchProfile } from '../api/types';
import { defaultDraft } from './draft';
import { targetOptions, withFirstTargets } from './targets';

const instance = (name: string, phase: string) => ({ name, phase }) as InstanceView;
const profile = (name: string, aliases: string[] = []) => ({ name, engine_build_id: 1, model: '/m.gguf', gateway: { aliases } }) as LaunchProfile;

describe('targetOptions', () => {
  it('lists ready instances, profiles, and the gateway’s names and aliases', () => {
    const o = targetOptions([instance('qwen', 'ready'), instance('big', 'loading')], [profile('qwen', ['gpt-4o-mini']), profile('big')]);
    expect(o).toEqual({ instances: ['qwen'], profiles: ['big', 'qwen'], gatewayModels: ['big', 'gpt-4o-mini', 'qwen'] });
    expect(targetOptions(null, null)).toEqual({ instances: [], profiles: [], gatewayModels: [] });
  });
});

describe('withFirstTargets', () => {
  it('fills empty picks and keeps made ones', () => {
    const o = { instances: ['a', 'b'], profiles: ['p'], gatewayModels: ['g'] };
    expect(withFirstTargets(defaultDraft(), o)).toMatchObject({ instance: 'a', profile: 'p', gatewayModel: 'g', targetKind: 'instance' });
    expect(withFirstTargets({ ...defaultDraft(), instance: 'b' }, o).instance).toBe('b');
  });
  it('makes a profile the kind of a new form when no instance is ready', () => {
    const o = { instances: [], profiles: ['p'], gatewayModels: ['p'] };
    expect(withFirstTargets(defaultDraft(), o, true).targetKind).toBe('profile');
    expect(withFirstTargets(defaultDraft(), o).targetKind).toBe('instance');
  });
});
