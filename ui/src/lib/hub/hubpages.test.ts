// The hub search and a model's page: typing is debounced and only the newest answer counts; the
// files show before the fit, and a change of context or rig asks for the fit again.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { FitRequest, HubSearchQuery, RigSample } from '../api/types';

const calls: { name: string; arg: unknown; signal?: AbortSignal; resolve: (v: unknown) => void; reject: (e: unknown) => void }[] = [];
function pending<T>(name: string, arg?: unknown, signal?: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => calls.push({ name, arg, signal, resolve: resolve as (v: unknown) => void, reject }));
}
const flush = () => new Promise((r) => setTimeout(r, 0));
function take(name: string) {
  const i = calls.findIndex((c) => c.name === name);
  if (i < 0) throw new Error(`no pending ${name}; have ${calls.map((c) => c.name).join(', ')}`);
  return calls.splice(i, 1)[0]!;
}

vi.mock('../api/client', async (orig) => {
  const real = await orig<typeof import('../api/client')>();
  return {
    ...real,
    api: {
      hubSearch: (q: HubSearchQuery, signal?: AbortSignal) => pending('search', q, signal),
      hubModel: (repo: string) => pending('model', repo),
      hubCard: (repo: string) => pending('card', repo),
      hubFit: (req: FitRequest, signal?: AbortSignal) => pending('fit', req, signal),
      rigs: () => Promise.resolve([{ id: '4x3090', name: '4× RTX 3090', source: '', devices: [] }]),
    },
  };
});

const { HubSearch } = await import('./search.svelte');
const { HubModelState } = await import('./model.svelte');
const { ApiError } = await import('../api/client');

/** Timers the test fires by hand. */
function manualTimers() {
  const pendingTimers = new Map<number, () => void>();
  let next = 0;
  return {
    setTimer: (fn: () => void) => {
      pendingTimers.set(++next, fn);
      return next;
    },
    clearTimer: (h: unknown) => void pendingTimers.delete(h as number),
    fire() {
      const fns = [...pendingTimers.values()];
      pendingTimers.clear();
      for (const fn of fns) fn();
    },
    get count() {
      return pendingTimers.size;
    },
  };
}

const hit = (id: string) => ({ id, downloads: 1, likes: 1, last_modified: null, pipeline_tag: null, tags: [], gated: false });

describe('HubSearch', () => {
  beforeEach(() => {
    calls.length = 0;
  });

  it('lists popular models first, then asks once typing pauses', async () => {
    const timers = manualTimers();
    const s = new HubSearch(timers);
    s.ensure();
    expect(take('search').arg).toEqual({ text: '', format: null, sort: 'downloads', limit: 40 });
    s.setText('q');
    s.setText('qw');
    s.setText('qwen');
    expect(calls.length).toBe(0);
    expect(s.busy).toBe(true);
    timers.fire();
    const c = take('search');
    expect((c.arg as HubSearchQuery).text).toBe('qwen');
    c.resolve([hit('Qwen/Qwen3-8B-GGUF')]);
    await flush();
    expect(s.results?.map((r) => r.id)).toEqual(['Qwen/Qwen3-8B-GGUF']);
    expect(s.busy).toBe(false);
  });

  it('drops a late answer to an older query and shows errors verbatim', async () => {
    const s = new HubSearch(manualTimers());
    s.setFormat('gguf');
    const older = take('search');
    s.setSort('likes');
    const newer = take('search');
    expect(older.signal?.aborted).toBe(true);
    expect(newer.arg).toMatchObject({ format: 'gguf', sort: 'likes' });
    newer.reject(new ApiError(502, 'hub_unavailable', 'huggingface.co did not answer (timed out)'));
    older.resolve([hit('old/answer')]);
    await flush();
    expect(s.results).toBeNull();
    expect(s.error).toEqual({ code: 'hub_unavailable', message: 'huggingface.co did not answer (timed out)' });
  });
});

describe('HubModelState', () => {
  beforeEach(() => {
    calls.length = 0;
  });

  const page = {
    model: { summary: hit('org/m'), commit: 'c'.repeat(40), private: false, gguf: null, page_url: 'https://huggingface.co/org/m' },
    revision: 'main',
    groups: [{ kind: 'gguf', label: 'Q4_K_M', files: [], total_bytes: 1, missing: null }],
    refused: [],
  };

  it('shows the files before the fit, pinned to the commit', async () => {
    const m = new HubModelState(manualTimers());
    const opening = m.open('org/m');
    take('model').resolve(page);
    await opening;
    expect(m.page).toBe(page);
    expect(m.fit).toBeNull();
    expect(m.fitBusy).toBe(true);
    const fit = take('fit');
    expect(fit.arg).toEqual({ repo: 'org/m', revision: 'c'.repeat(40), rig: 'live', context: 32768 });
    fit.resolve({ commit: 'c'.repeat(40), rig: 'live', context: 32768, quants: [] });
    take('card').resolve({ commit: 'c'.repeat(40), markdown: '# M' });
    await flush();
    expect(m.fit?.context).toBe(32768);
    expect(m.card?.markdown).toBe('# M');
    expect(m.fitBusy).toBe(false);
  });

  it('asks again on a new context (debounced) or rig (at once), keeping only the newest', async () => {
    const timers = manualTimers();
    const m = new HubModelState(timers);
    const opening = m.open('org/m');
    take('model').resolve(page);
    await opening;
    const first = take('fit');
    m.setContext(65536);
    expect(first.signal?.aborted).toBe(true);
    timers.fire();
    expect(take('fit').arg).toMatchObject({ context: 65536, rig: 'live' });
    m.setRig('4x3090');
    const last = take('fit');
    expect(last.arg).toMatchObject({ context: 65536, rig: '4x3090' });
    last.reject(new ApiError(400, 'unknown_rig', "unknown rig '4x3090'"));
    await flush();
    expect(m.fitError?.message).toBe("unknown rig '4x3090'");
    expect(m.page).toBe(page);
  });

  it('plans the live rig again when its free memory moves materially, debounced, keeping the fit shown', async () => {
    const GIB = 1024 ** 3;
    const sample = (gpuFree: number) =>
      ({
        at_ms: 0,
        gpus: { driver: { state: 'ready' }, gpus: [{ index: 0, lost: null, memory: { total_bytes: 24 * GIB, used_bytes: 24 * GIB - gpuFree, free_bytes: gpuFree } }] },
        host: { memory: { total_bytes: 64 * GIB, used_bytes: 0, available_bytes: 40 * GIB, swap_total_bytes: 0, swap_used_bytes: 0 } },
      }) as unknown as RigSample;
    const timers = manualTimers();
    const m = new HubModelState(timers);
    m.observeRig(sample(23 * GIB));
    const opening = m.open('org/m');
    take('model').resolve(page);
    await opening;
    const shown = { commit: 'c'.repeat(40), rig: 'live', context: 32768, quants: [] };
    take('fit').resolve(shown);
    await flush();

    // A few MiB come and go: nothing is asked.
    m.observeRig(sample(23 * GIB - 100 * 1024 ** 2));
    timers.fire();
    expect(calls.some((c) => c.name === 'fit')).toBe(false);

    // An engine takes 8 GiB over a few frames: one fit, once the frames settle.
    m.observeRig(sample(19 * GIB));
    m.observeRig(sample(15 * GIB));
    expect(calls.some((c) => c.name === 'fit')).toBe(false);
    expect(timers.count).toBe(1);
    timers.fire();
    const again = take('fit');
    expect(again.arg).toEqual({ repo: 'org/m', revision: 'c'.repeat(40), rig: 'live', context: 32768 });
    expect(m.fit).toBe(shown);
    again.resolve({ ...shown, quants: [] });
    await flush();
    // The same reading again is not a change: the fit was made on it.
    m.observeRig(sample(15 * GIB));
    timers.fire();
    expect(calls.some((c) => c.name === 'fit')).toBe(false);

    // A preset is not this rig: its fit does not follow the live one.
    m.setRig('4x3090');
    take('fit').resolve({ ...shown, rig: '4x3090' });
    await flush();
    m.observeRig(sample(2 * GIB));
    timers.fire();
    expect(calls.some((c) => c.name === 'fit')).toBe(false);
  });

  it('shows why the page could not load, and drops answers for a model left since', async () => {
    const m = new HubModelState(manualTimers());
    const a = m.open('org/gated');
    const gated = take('model');
    const b = m.open('org/m');
    gated.reject(new ApiError(403, 'hub_gated', 'org/gated is gated: accept its terms on the hub and set a token'));
    take('model').resolve(page);
    await Promise.all([a, b]);
    expect(m.repo).toBe('org/m');
    expect(m.pageError).toBeNull();
    expect(m.page).toBe(page);
  });

  it('plans nothing for a repository without GGUF', async () => {
    const m = new HubModelState(manualTimers());
    const opening = m.open('org/st');
    take('model').resolve({ ...page, groups: [{ kind: 'safetensors', label: 'safetensors', files: [], total_bytes: 1, missing: null }] });
    await opening;
    expect(calls.some((c) => c.name === 'fit')).toBe(false);
    expect(m.fitBusy).toBe(false);
  });
});
