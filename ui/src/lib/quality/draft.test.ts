// The record form's request and what it says when it cannot be sent; the KLD runs the measure
// form starts.

import { describe, expect, it } from 'vitest';
import { reference } from '../../test/quality';
import { defaultRecordDraft, kldRuns, readyReferences, recordBody, type RecordDraft } from './draft';

function draft(extra: Partial<RecordDraft>): RecordDraft {
  return { ...defaultRecordDraft(), ...extra };
}

describe('the record form', () => {
  it('starts at 8192 tokens per window, every window, the built-in corpus', () => {
    const d = defaultRecordDraft();
    expect(d).toMatchObject({ context: '8192', chunks: '', corpusKind: 'builtin', modelKind: 'file' });
  });

  it('sends a model file on the built-in corpus', () => {
    expect(recordBody(draft({ path: '/m/g.gguf', context: '512', chunks: '2' }))).toEqual({
      ok: true,
      body: { model: { kind: 'file', path: '/m/g.gguf' }, corpus: { kind: 'builtin' }, context: 512, chunks: 2 },
    });
  });

  it('sends a profile, a text file and blank windows as all', () => {
    const r = recordBody(draft({ modelKind: 'profile', profile: 'gemma', corpusKind: 'file', filePath: ' /data/notes.txt ' }));
    expect(r).toEqual({ ok: true, body: { model: { kind: 'profile', name: 'gemma' }, corpus: { kind: 'file', path: '/data/notes.txt' }, context: 8192, chunks: null } });
  });

  it('sends the ticked conversations in order', () => {
    const r = recordBody(draft({ path: '/m/g.gguf', corpusKind: 'conversations', conversations: [9, 2, 5] }));
    expect(r.ok && r.body.corpus).toEqual({ kind: 'conversations', ids: [2, 5, 9] });
  });

  it('says what to fix first', () => {
    const problem = (d: Partial<RecordDraft>) => {
      const r = recordBody(draft(d));
      return r.ok ? null : r.problem;
    };
    expect(problem({})).toMatch(/^Pick a model file/);
    expect(problem({ modelKind: 'profile' })).toMatch(/^Pick a launch profile/);
    expect(problem({ path: '/m/g.gguf', corpusKind: 'file' })).toMatch(/path of a text file/);
    expect(problem({ path: '/m/g.gguf', corpusKind: 'file', filePath: 'notes.txt' })).toMatch(/"notes.txt" is not an absolute path/);
    expect(problem({ path: '/m/g.gguf', corpusKind: 'conversations' })).toMatch(/at least one conversation/);
    expect(problem({ path: '/m/g.gguf', context: '8k' })).toMatch(/Tokens per window .* not "8k"/);
    expect(problem({ path: '/m/g.gguf', context: '8' })).toMatch(/from 16 up/);
    expect(problem({ path: '/m/g.gguf', chunks: '0' })).toMatch(/Windows must be .* not "0"/);
    expect(problem({ path: '/m/g.gguf', chunks: '2.5' })).toMatch(/Windows must be/);
  });
});

describe('measuring', () => {
  it('offers ready references only, newest first', () => {
    const refs = [
      reference('old', { created_at_ms: 1 }),
      reference('busy', { state: 'recording', created_at_ms: 5 }),
      reference('new', { created_at_ms: 3 }),
      reference('bad', { state: 'failed', created_at_ms: 4 }),
    ];
    expect(readyReferences(refs).map((r) => r.id)).toEqual(['new', 'old']);
  });

  it('starts one KLD run per profile against the reference', () => {
    expect(kldRuns(['q8', 'q4'], 'ref1')).toEqual([
      { name: 'kld q8', kind: 'kld', target: { kind: 'profile', name: 'q8' }, kld: { reference: 'ref1' } },
      { name: 'kld q4', kind: 'kld', target: { kind: 'profile', name: 'q4' }, kld: { reference: 'ref1' } },
    ]);
  });
});
