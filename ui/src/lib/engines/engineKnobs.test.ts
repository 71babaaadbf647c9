import { describe, expect, it } from 'vitest';
import type { EngineBuild, LaunchProfile } from '../api/types';
import { applyEngineForm, engineFormOf, knobsFor, specMethodsFor } from './engineKnobs';

const profile: LaunchProfile = { name: 'p', engine_build_id: 1, model: '/m.gguf' };

function build(kind: string, types: string[], options: string[] = []): EngineBuild {
  return {
    id: 1,
    kind,
    version: 'v',
    backend: 'cpu',
    cuda_architectures: null,
    location: '/x',
    capabilities: { features: { speculative_types: types }, options },
    source: 'built',
    created_at_ms: 0,
    status: 'ready',
  };
}

describe('engine knobs', () => {
  it('lists each engine’s own knobs with its flag', () => {
    const ik = knobsFor('ik_llama.cpp').map((k) => k.key);
    expect(ik).toContain('mla');
    expect(knobsFor('llama.cpp').map((k) => k.key)).not.toContain('mla');
    const vllm = knobsFor('vllm');
    expect(vllm.find((k) => k.key === 'max_num_seqs')?.flags.vllm).toBe('--max-num-seqs');
    expect(knobsFor('sglang').find((k) => k.key === 'max_num_seqs')?.flags.sglang).toBe('--max-running-requests');
    expect(knobsFor('sglang').map((k) => k.key)).not.toContain('marlin_atomic_add');
    for (const knob of [...ik, ...vllm.map((k) => k.key)]) expect(knob).toBeTruthy();
  });

  it('offers the methods the build has', () => {
    const upstream = build('llama.cpp', ['draft-simple', 'draft-mtp', 'ngram-mod', 'draft-eagle3'], ['--spec-draft-model']);
    expect(specMethodsFor(upstream)).toEqual(['draft_model', 'mtp', 'ngram', 'eagle3']);
    const ik = build('ik_llama.cpp', ['ngram-mod'], ['-md', '-mtp']);
    expect(specMethodsFor(ik)).toEqual(['draft_model', 'mtp', 'ngram']);
    expect(specMethodsFor(build('sglang', ['EAGLE', 'NEXTN']))).toEqual(['mtp', 'eagle']);
    expect(specMethodsFor(build('vllm', []))).toHaveLength(5);
    expect(specMethodsFor(undefined)).toEqual([]);
  });

  it('writes only the engine’s knobs and a checked speculative setting', () => {
    const form = engineFormOf(profile);
    form.values.max_num_seqs = '8';
    form.values.mlock = true;
    form.values.marlin_atomic_add = true;
    form.method = 'mtp';
    form.tokens = '3';
    form.minTokens = '1';
    const out = applyEngineForm(profile, form, 'vllm');
    if ('error' in out) throw new Error(out.error);
    expect(out.profile.engine?.max_num_seqs).toBe(8);
    expect(out.profile.engine?.marlin_atomic_add).toBe(true);
    expect(out.profile.engine).not.toHaveProperty('mlock');
    expect(out.profile.speculative).toEqual({ method: 'mtp', tokens: 3, draft_model: null, min_tokens: null, p_min: null, ngram_match: null });
    // Read back, the form shows what was saved.
    expect(engineFormOf(out.profile).values.max_num_seqs).toBe('8');
  });

  it('names the problem with a field', () => {
    const form = engineFormOf(profile);
    form.values.max_num_seqs = 'eight';
    expect(applyEngineForm(profile, form, 'vllm')).toEqual({ error: 'Sequences at once must be a whole number of 0 or more, or empty.' });
    const draft = engineFormOf(profile);
    draft.method = 'draft_model';
    expect(applyEngineForm(profile, draft, 'llama.cpp')).toEqual({ error: 'Draft model needs the path of the draft checkpoint.' });
    draft.draftModel = '/d.gguf';
    draft.tokens = '0';
    expect(applyEngineForm(profile, draft, 'llama.cpp')).toEqual({ error: 'Draft tokens must be 1 or more (2–4 is typical).' });
    const off = applyEngineForm(profile, engineFormOf(profile), 'llama.cpp');
    expect('profile' in off && off.profile.speculative).toBeNull();
  });
});
