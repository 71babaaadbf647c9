// The cache store: loaded when shown, again when a download finishes (only the newest answer
// counts); Verify waits for its answer; Delete shows the model gone at once, forgets the
// finished downloads whose files went, and reads the list again.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { CachedModel, HubCacheListing } from '../api/types';
import { view } from '../../test/downloads';
import { flush, pendingCalls, withApi } from '../../test/pending';

const GIB = 1024 ** 3;
const COMMIT = 'c'.repeat(40);
const DIR = '/hf/hub/models--unsloth--Qwen3-8B-GGUF';

const { calls, pending, take, answer } = pendingCalls();

vi.mock('../api/client', (orig) =>
  withApi(orig, {
    hubCache: () => pending('list'),
    settings: () => pending('settings'),
    verifyCached: (repo: string, revision?: string) => pending(`verify ${repo}`, revision),
    removeCached: (repo: string, commit?: string) => pending(`remove ${repo}`, commit),
    forgetDownload: (id: number) => pending(`forget ${id}`),
  }),
);

const { HubCacheState, cacheKey } = await import('./cache.svelte');
const { downloads } = await import('./downloads.svelte');
const { ApiError } = await import('../api/client');

function model(repo = 'unsloth/Qwen3-8B-GGUF', dir = DIR): CachedModel {
  return {
    repo,
    dir,
    snapshots: [{ commit: COMMIT, refs: ['main'], files: [{ path: 'Qwen3-8B-Q4_K_M.gguf', blob: 'w', size_bytes: 4 * GIB }] }],
    size_on_disk: 4 * GIB,
  };
}
const OTHER = model('org/other', '/hf/hub/models--org--other');
const listing = (...models: CachedModel[]): HubCacheListing => ({ cache_dir: '/hf/hub', models });

/** A store with the list shown. */
async function shown(l: HubCacheListing = listing(OTHER, model())) {
  const s = new HubCacheState();
  s.setDownloadFolder(null);
  const loading = s.ensure();
  await answer('list', l);
  await loading;
  return s;
}

describe('the cache store', () => {
  beforeEach(() => {
    calls.length = 0;
  });

  it('loads the list and where downloads go once', async () => {
    const s = new HubCacheState();
    const loading = s.ensure();
    expect(s.loading).toBe(true);
    // The downloads panel and the cache panel both ask: one request each.
    const again = s.ensure();
    expect(calls.map((c) => c.name).sort()).toEqual(['list', 'settings']);
    await answer('settings', { telemetry_period_ms: 1000, model_folders: [], keep_running_in_background: false, download_folder: '/data/dl', usage_retention_days: 90 });
    await answer('list', listing(model()));
    await Promise.all([loading, again]);
    expect(s.downloadFolder).toBe('/data/dl');
    expect(s.find('unsloth/Qwen3-8B-GGUF')?.size_on_disk).toBe(4 * GIB);
    expect(s.find('org/none')).toBeNull();
    expect(s.loading).toBe(false);
    await s.ensure();
    expect(calls).toEqual([]);
  });

  it('reads the list again when a download finishes, keeping only the newest answer', async () => {
    const s = await shown(listing(OTHER));
    s.ingestDownload(view(1, 'running', GIB));
    expect(calls).toEqual([]);
    s.ingestDownload(view(1, 'done', 4 * GIB));
    void s.refresh();
    const [older, newer] = [take('list'), take('list')];
    newer.resolve(listing(OTHER, model()));
    await flush();
    older.resolve(listing(OTHER));
    await flush();
    expect(s.listing?.models.map((m) => m.repo)).toEqual(['org/other', 'unsloth/Qwen3-8B-GGUF']);
    expect(s.loading).toBe(false);
  });

  it('refreshes nothing it never showed', async () => {
    const s = new HubCacheState();
    await s.refresh();
    s.ingestDownload(view(1, 'done', 4 * GIB));
    expect(calls).toEqual([]);
  });

  it("shows a failed load's message and loads again on request", async () => {
    const s = new HubCacheState();
    s.setDownloadFolder(null);
    const loading = s.ensure();
    take('list').reject(new ApiError(500, 'cache', 'permission denied'));
    await loading;
    expect(s.error).toEqual({ code: 'cache', message: 'permission denied' });
    // ensure does not retry in a loop; a refresh (a download finished) does.
    await s.ensure();
    expect(calls).toEqual([]);
    const again = s.refresh();
    await answer('list', listing());
    await again;
    expect(s.error).toBeNull();
    expect(s.listing?.models).toEqual([]);
  });

  it('verifies main, busy until the answer, and keeps the result until the snapshot goes', async () => {
    const s = await shown();
    const verifying = s.verify('unsloth/Qwen3-8B-GGUF');
    expect(s.verifying['unsloth/Qwen3-8B-GGUF']).toBe(true);
    // A second click while it runs asks nothing more.
    await s.verify('unsloth/Qwen3-8B-GGUF');
    const c = take('verify unsloth/Qwen3-8B-GGUF');
    expect(c.arg).toBeUndefined();
    expect(calls).toEqual([]);
    c.resolve({ commit: COMMIT, files: [{ path: 'Qwen3-8B-Q4_K_M.gguf', ok: true, problem: null }], upstream_commit: null });
    await verifying;
    expect(s.verifying['unsloth/Qwen3-8B-GGUF']).toBeUndefined();
    expect(s.verified['unsloth/Qwen3-8B-GGUF']?.files).toHaveLength(1);
    // Still there after a reload that keeps the snapshot; gone with it.
    const again = s.load();
    await answer('list', listing(OTHER, model()));
    await again;
    expect(s.verified['unsloth/Qwen3-8B-GGUF']).toBeDefined();
    const last = s.load();
    await answer('list', listing(OTHER));
    await last;
    expect(s.verified['unsloth/Qwen3-8B-GGUF']).toBeUndefined();
  });

  it("shows the hub's refusal of a verification", async () => {
    const s = await shown();
    const verifying = s.verify('org/other');
    take('verify org/other').reject(new ApiError(502, 'hub_unavailable', 'huggingface.co did not answer (timed out)'));
    await verifying;
    expect(s.verifyError['org/other']?.message).toBe('huggingface.co did not answer (timed out)');
    expect(s.verifying['org/other']).toBeUndefined();
  });

  it('deletes a model: gone at once, its finished downloads forgotten, the list read again', async () => {
    const s = await shown();
    const paths = [`${DIR}/snapshots/${COMMIT}/Qwen3-8B-Q4_K_M.gguf`];
    downloads.items = [view(2, 'done', 4 * GIB, { paths }), view(3, 'done', 1, { repo: 'org/other', paths: [`/hf/hub/models--org--other/snapshots/${COMMIT}/x.gguf`] })];
    // A list asked for before the deletion answers after it: it is older.
    void s.refresh();
    const stale = take('list');
    const removing = s.remove('unsloth/Qwen3-8B-GGUF');
    expect(s.removing[cacheKey('unsloth/Qwen3-8B-GGUF')]).toBe(true);
    const c = take('remove unsloth/Qwen3-8B-GGUF');
    expect(c.arg).toBeUndefined();
    c.resolve({ freed_bytes: 4 * GIB, blobs_removed: 1, blobs_kept: 0 });
    await flush();
    expect(s.find('unsloth/Qwen3-8B-GGUF')).toBeNull();
    expect(s.removed).toEqual({ repo: 'unsloth/Qwen3-8B-GGUF', commit: null, result: { freed_bytes: 4 * GIB, blobs_removed: 1, blobs_kept: 0 } });
    await answer('forget 2', { removed: 2 });
    await removing;
    expect(downloads.items.map((d) => d.id)).toEqual([3]);
    expect(s.removing).toEqual({});
    stale.resolve(listing(OTHER, model()));
    await flush();
    expect(s.find('unsloth/Qwen3-8B-GGUF')).toBeNull();
    await answer('list', listing(OTHER));
    expect(s.listing?.models.map((m) => m.repo)).toEqual(['org/other']);
  });

  it('deletes one snapshot by its commit', async () => {
    const s = await shown();
    const removing = s.remove('org/other', COMMIT);
    expect(s.removing[cacheKey('org/other', COMMIT)]).toBe(true);
    const c = take('remove org/other');
    expect(c.arg).toBe(COMMIT);
    c.resolve({ freed_bytes: 4 * GIB, blobs_removed: 1, blobs_kept: 0 });
    await flush();
    // The download of org/other left from the test before was in that snapshot.
    await answer('forget 3', { removed: 3 });
    await removing;
    expect(s.removed?.commit).toBe(COMMIT);
    expect(downloads.items).toEqual([]);
    take('list');
  });

  it("shows a refused deletion's message and reads the list again", async () => {
    const s = await shown();
    const removing = s.remove('org/other');
    take('remove org/other').reject(new ApiError(404, 'cache', 'org/other has no such snapshot in /hf/hub'));
    await expect(removing).resolves.toBe(false);
    expect(s.removeError['org/other']?.message).toBe('org/other has no such snapshot in /hf/hub');
    expect(s.removed).toBeNull();
    await answer('list', listing(model()));
    expect(s.find('org/other')).toBeNull();
  });

  it('signs out on a 401', async () => {
    const s = new HubCacheState();
    const out = vi.fn();
    s.setUnauthorizedHandler(out);
    const loading = s.ensure();
    take('settings').reject(new ApiError(401, 'unauthorized', 'sign in'));
    take('list').reject(new ApiError(401, 'unauthorized', 'sign in'));
    await loading;
    expect(out).toHaveBeenCalledTimes(2);
    expect(s.error).toBeNull();
  });
});
