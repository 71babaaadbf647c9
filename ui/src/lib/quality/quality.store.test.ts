// The Quality section's state against a hand-answered API: references listed and kept current by
// events (with the disk they use), the estimate of the latest form only, a refusal kept in the
// daemon's words, and a deleted reference leaving the list and its budget.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import { estimate, reference } from '../../test/quality';
import { pendingCalls, withApi } from '../../test/pending';
import type { NewReference } from './types';

const { calls, pending, take, answer } = pendingCalls();

vi.mock('../api/client', (orig) =>
  withApi(orig, {
    updateSettings: (patch: unknown) => pending('settings', patch),
  }),
);
vi.mock('./client', async (orig) => ({
  ...(await orig<typeof import('./client')>()),
  qualityApi: {
    references: () => pending('references'),
    corpora: () => pending('corpora'),
    estimate: (body: unknown) => pending('estimate', body),
    record: (body: unknown) => pending('record', body),
    remove: (id: string) => pending('remove', id),
    frontier: (id: string) => pending('frontier', id),
  },
}));

const { QualityState, placeReference } = await import('./quality.svelte');
const { ApiError } = await import('../api/client');

const body = (context: number): NewReference => ({ model: { kind: 'file', path: '/m/g.gguf' }, corpus: { kind: 'builtin' }, context, chunks: null });

async function listed(refs = [reference('b', { created_at_ms: 2, bytes: 300 }), reference('a', { created_at_ms: 1, bytes: 200 })]) {
  const s = new QualityState();
  const loading = s.load();
  await answer('references', { references: refs, budget_bytes: 10_000, used_bytes: 500, free_disk_bytes: null });
  await answer('corpora', { builtin: { label: 'built-in v1', bytes: 1, parts: [] }, token_counts: [] });
  await loading;
  return s;
}

beforeEach(() => {
  calls.length = 0;
});

describe('references', () => {
  it('are listed newest first and replaced by their events, the used bytes following', async () => {
    const s = await listed();
    expect(s.references.map((r) => r.id)).toEqual(['b', 'a']);
    s.ingest(reference('c', { state: 'recording', created_at_ms: 3, bytes: 1000, progress: { fraction: 0.1, eta_s: 60 } }));
    expect(s.references.map((r) => r.id)).toEqual(['c', 'b', 'a']);
    expect(s.listing!.used_bytes).toBe(1500);
    s.ingest(reference('c', { state: 'ready', created_at_ms: 3, bytes: 900 }));
    expect(s.references.map((r) => [r.id, r.state])).toEqual([['c', 'ready'], ['b', 'ready'], ['a', 'ready']]);
    expect(s.listing!.used_bytes).toBe(1400);
  });

  it('keep the corpora when the references cannot be read', async () => {
    const s = new QualityState();
    const loading = s.load();
    take('references').reject(new ApiError(500, 'internal', 'the store is locked'));
    await answer('corpora', { builtin: { label: 'built-in v1', bytes: 5, parts: [] }, token_counts: [] });
    await loading;
    expect(s.listError).toEqual({ code: 'internal', message: 'the store is locked' });
    expect(s.corpora?.builtin.label).toBe('built-in v1');
  });

  it('a delete removes the reference, its bytes and its frontier', async () => {
    const s = await listed();
    const loadingFrontier = s.loadFrontier('a');
    await answer('frontier', { reference: reference('a'), points: [] });
    await loadingFrontier;
    expect(Object.keys(s.frontiers)).toEqual(['a']);
    const removing = s.remove('a');
    expect(s.deleting).toEqual({ a: true });
    expect((await answer('remove', undefined)).arg).toBe('a');
    expect(await removing).toBe(true);
    expect(s.references.map((r) => r.id)).toEqual(['b']);
    expect(s.listing!.used_bytes).toBe(300);
    expect(s.frontiers).toEqual({});
    expect(s.deleting).toEqual({});
  });
});

describe('placeReference', () => {
  it('counts a new reference’s bytes once', () => {
    const l = placeReference({ references: [], budget_bytes: 10, used_bytes: 0, free_disk_bytes: 5 }, reference('x', { bytes: 4 }));
    expect(placeReference(l, reference('x', { bytes: 4 })).used_bytes).toBe(4);
  });
});

describe('the estimate', () => {
  it('keeps only the answer to the latest form', async () => {
    const s = await listed();
    const first = s.estimateFor(body(512));
    const second = s.estimateFor(body(8192));
    expect(s.estimating).toBe(true);
    const [old, latest] = [take('estimate'), take('estimate')];
    expect((latest.arg as NewReference).context).toBe(8192);
    latest.resolve(estimate({ chunks: 1 }));
    await second;
    old.resolve(estimate({ chunks: 99 }));
    await first;
    expect(s.estimate?.chunks).toBe(1);
    expect(s.estimating).toBe(false);
  });

  it('shows a refusal in the daemon’s words and forgets it when the form cannot be sent', async () => {
    const s = await listed();
    const asking = s.estimateFor(body(8192));
    take('estimate').reject(new ApiError(400, 'invalid_reference', 'no model file /m/g.gguf: pick one from the library'));
    await asking;
    expect(s.estimateError?.message).toMatch(/pick one from the library/);
    await s.estimateFor(null);
    expect(s.estimateError).toBeNull();
    expect(s.estimate).toBeNull();
  });

  it('a refused recording says why and leaves the list', async () => {
    const s = await listed();
    const rec = s.record(body(8192));
    take('record').reject(new ApiError(400, 'too_little_disk', 'the file needs 9 GiB, the disk has 2 GiB free: free some space'));
    expect(await rec).toBeNull();
    expect(s.recordError?.code).toBe('too_little_disk');
    expect(s.references).toHaveLength(2);
  });
});

describe('the quality.reference event', () => {
  it('is read with its reference, and refused without an id', async () => {
    const { parseServerMessage } = await import('../api/events');
    const ref = reference('r1', { state: 'recording', progress: { fraction: 0.5, eta_s: 30 } });
    expect(parseServerMessage(JSON.stringify({ type: 'quality.reference', data: ref }))).toEqual({ ok: true, event: { type: 'quality.reference', data: ref } });
    expect(parseServerMessage(JSON.stringify({ type: 'quality.reference', data: { state: 'ready' } }))).toEqual({ ok: false, error: 'quality.reference needs id, state and created_at_ms' });
  });
});

describe('the budget', () => {
  it('is saved as a setting in GB, then the listing is read again', async () => {
    const s = await listed();
    const saving = s.setBudget(50);
    expect(s.savingBudget).toBe(true);
    expect((await answer('settings', {})).arg).toEqual({ quality_reference_budget_gb: 50 });
    await answer('references', { references: [], budget_bytes: 50e9, used_bytes: 0, free_disk_bytes: null });
    await answer('corpora', { builtin: { label: 'built-in v1', bytes: 1, parts: [] }, token_counts: [] });
    expect(await saving).toBe(true);
    expect(s.listing?.budget_bytes).toBe(50e9);
    expect(s.savingBudget).toBe(false);
  });

  it('keeps the daemon’s refusal', async () => {
    const s = await listed();
    const saving = s.setBudget(0.5);
    take('settings').reject(new ApiError(400, 'invalid_settings', 'quality_reference_budget_gb 0.5 is out of range: give between 1 and 100000 GB'));
    expect(await saving).toBe(false);
    expect(s.budgetError?.message).toMatch(/between 1 and 100000 GB/);
  });
});
